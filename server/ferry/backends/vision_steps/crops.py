"""``crop``: every detection of every image cut out and pre-processed for a second model.

The number of detections differs per image, so the crops of all images of the request form one
flat batch, ``CROPS`` [M, ...], with ``CROP_IMAGE_INDEX`` [M, 1] saying which image each came from
(in detection order within an image). The second model then batches all of them together, and
with the requests of other clients. Rows do not follow images, so the step has max_batch_size 0.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from ferry_client.protocol import model_config_pb2 as mc

from ...errors import InvalidArgument, ModelLoadError
from ...pipelines.decode import decode_image
from ...pipelines.preprocess import PreprocessSpec, preprocess
from ...pipelines.runtime import DEFAULT_MAX_PIXELS
from .backend import StepCompute, settings, tensor_datatype, tensor_dims
from .images import require


def cut(image: Image.Image, box: np.ndarray) -> Image.Image:
    """The pixels a box (x1, y1, x2, y2, continuous coordinates) touches, at least one pixel."""
    width, height = image.size
    x1 = min(max(math.floor(float(box[0])), 0), width - 1)
    y1 = min(max(math.floor(float(box[1])), 0), height - 1)
    x2 = max(min(math.ceil(float(box[2])), width), x1 + 1)
    y2 = max(min(math.ceil(float(box[3])), height), y1 + 1)
    return image.crop((x1, y1, x2, y2))


def crop_step(config: mc.ModelConfig) -> StepCompute:
    if config.max_batch_size != 0:
        raise ModelLoadError("the crop step returns a row per detection, not per image: set max_batch_size: 0")
    require(config, "input", "IMAGE", "BYTES", (-1, 1))
    require(config, "input", "num_detections", "INT32", (-1, 1))
    boxes_dims = tensor_dims(config, "input", "detection_boxes")
    require(config, "input", "detection_boxes", "FP32", (-1, boxes_dims[1] if len(boxes_dims) == 3 else 0, 4))
    require(config, "output", "CROP_IMAGE_INDEX", "INT32", (-1, 1))
    dims = tensor_dims(config, "output", "CROPS")
    if not dims or dims[0] != -1:
        raise ModelLoadError(f"output 'CROPS' needs dims [-1, ...] (one row per detection), got {list(dims)}")
    pre = settings(config, "preprocess", mc.FerryPreprocess)
    spec = PreprocessSpec.from_config(pre, dims[1:], tensor_datatype(config, "output", "CROPS"), variable_sizes=False)
    max_pixels = spec.max_pixels or DEFAULT_MAX_PIXELS

    def compute(inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        images = inputs["IMAGE"].reshape(-1)
        boxes = inputs["detection_boxes"].reshape(len(images), -1, 4)
        counts = inputs["num_detections"].reshape(-1)
        crops: list[np.ndarray] = []
        index: list[int] = []
        for number, data in enumerate(images):
            count = int(counts[number])
            if count <= 0:
                continue
            chosen = boxes[number, :count]
            if not np.isfinite(chosen).all():  # a client may call the step directly with any numbers
                raise InvalidArgument(f"image {number}: detection_boxes must be finite numbers (got NaN or infinity)")
            image = decode_image(bytes(data), max_pixels=max_pixels, index=number)
            for box in chosen:
                crops.append(preprocess(cut(image, box), spec)[0])
                index.append(number)
        batch = np.stack(crops) if crops else np.empty((0, *spec.tensor_shape), spec.dtype)
        return {"CROPS": batch, "CROP_IMAGE_INDEX": np.array(index, np.int32).reshape(-1, 1)}

    return compute
