"""The intake's hand-over of a ``preprocess { device: GPU }`` model's images, alone (issue 41, item 4):
uncompressed BMP (main at bdc2482) against raw pixels (``pipelines/handed_images.py``), µs of CPU per
640x480 JPEG in each process, in interleaved rounds.

Without CUDA such a model refuses to load, so the served path cannot be measured here; this runs
the code each side runs per image, the same calls in the same order:

- intake, BMP: ``decode_image``, ``to_model_mode``, ``Image.save(format="BMP")``, the BYTES element
  written (``encode_bytes_elements``) into an arena stand-in; pixels: ``ImagePipeline.hand_over``
  (decode, ``pixels_of``, ``handed_images.pack``) and the tensor copied into the arena stand-in;
- model process, BMP: the element read out of the arena (``decode_bytes_elements``), admission's
  ``image_cost`` (its header), ``ImagePipeline.prepare`` decoding the BMP (``decode_image``,
  ``to_model_mode``, ``pixels_of``, placement); pixels: ``handed_images.unpack`` (views),
  ``device_image_cost``, ``ImagePipeline.prepare`` taking the pixels as they are.

Both stop where the images wait for their batch (``DevicePixels``): the device's upload copy that
follows is the same for both. Per-image CPU time is ``time.process_time_ns`` over ``--images``
hand-overs, the two forms alternating round after round (``--rounds``); medians and spread printed.
glibc's mmap threshold is the server's (``ferry.heap.return_large_buffers``).

    python benchmarks/handed_pixels.py --rounds 15 --images 200
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf import text_format
from PIL import Image

from ferry.heap import return_large_buffers
from ferry.pipelines import handed_images
from ferry.pipelines.decode import decode_image
from ferry.pipelines.device_pixels import DevicePixels
from ferry.pipelines.preprocess import PreprocessSpec, to_model_mode
from ferry.pipelines.resize_bounds import device_image_cost, image_cost
from ferry.pipelines.runtime import ImagePipeline
from ferry_client.codec.tensors import decode_bytes_elements, encode_bytes_elements
from ferry_client.protocol import model_config_pb2 as mc

#: ResNet-50's pre-processing, on the device.
PREPROCESS = """
color_order: RGB layout: NCHW resize: SHORTER_SIDE_CENTER_CROP resize_shorter: 256 interpolation: BILINEAR
resize_engine: PILLOW mean: [123.675, 116.28, 103.53] std: [58.395, 57.12, 57.375] device: GPU
"""
MAX_PIXELS = 40_000_000


class Waiting:
    """The device pre-processor as ``prepare`` sees it when the batcher takes its work (never called)."""

    device = "cpu"
    decoder = None

    def __call__(self, images: Any, placements: Any, on_device: bool = False) -> Any:
        raise AssertionError("the images wait for their batch")


def photo() -> bytes:
    """A 640x480 JPEG (quality 90) of a real photo: scikit-learn's china.jpg, resized."""
    from sklearn.datasets import load_sample_image

    image = Image.fromarray(load_sample_image("china.jpg")).resize((640, 480), Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def pipelines() -> tuple[ImagePipeline, ImagePipeline]:
    """The intake's pipeline (no device pre-processor) and the model process's."""
    pre = text_format.Parse(PREPROCESS, mc.FerryPreprocess())
    spec = PreprocessSpec.from_config(pre, (3, 224, 224), "FP32")
    intake = ImagePipeline("input", spec, None, None, ["logits"], None, MAX_PIXELS, None, (3, 224, 224), 64)
    model = ImagePipeline("input", spec, None, None, ["logits"], None, MAX_PIXELS, Waiting(), (3, 224, 224), 64)
    return intake, model


def bmp_form(intake: ImagePipeline, model: ImagePipeline, jpeg: bytes, arena: bytearray) -> tuple[Callable, Callable]:
    spec = intake.spec
    assert spec is not None

    def intake_side() -> int:
        image = to_model_mode(decode_image(jpeg, max_pixels=MAX_PIXELS, target_size=spec.draft_size), spec)
        buffer = io.BytesIO()
        image.save(buffer, format="BMP")
        tensor = np.empty(1, dtype=object)
        tensor[:] = [buffer.getvalue()]
        payload = encode_bytes_elements(tensor)
        arena[: len(payload)] = payload
        return len(payload)

    def model_side(size: int) -> None:
        (data,) = decode_bytes_elements("input", memoryview(arena)[:size], 1)
        image_cost(data, spec, MAX_PIXELS, 0)
        prepared = model.prepare([data], 0, on_device=True)
        assert isinstance(prepared.batch, DevicePixels)

    return intake_side, model_side


def pixel_form(intake: ImagePipeline, model: ImagePipeline, jpeg: bytes, arena: bytearray) -> tuple[Callable, Callable]:
    spec = intake.spec
    assert spec is not None
    view = np.frombuffer(arena, dtype=np.uint8)

    def intake_side() -> int:
        ((_, tensor),), _ = intake.hand_over([jpeg])
        np.copyto(view[: tensor.nbytes], tensor, casting="no")
        return tensor.nbytes

    def model_side(size: int) -> None:
        (pixels,) = handed_images.unpack(view[:size])
        device_image_cost(pixels, spec, MAX_PIXELS, 0)
        prepared = model.prepare([pixels], 0, on_device=True)
        assert isinstance(prepared.batch, DevicePixels)

    return intake_side, model_side


def timed(intake_side: Callable[[], int], model_side: Callable[[int], None], images: int) -> tuple[float, float]:
    """µs of CPU per image: the intake's side, the model process's side."""
    intake_ns = model_ns = 0
    for _ in range(images):
        t0 = time.process_time_ns()
        size = intake_side()
        t1 = time.process_time_ns()
        model_side(size)
        model_ns += time.process_time_ns() - t1
        intake_ns += t1 - t0
    return intake_ns / images / 1000, model_ns / images / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--images", type=int, default=200, help="hand-overs per form and round")
    args = parser.parse_args()
    return_large_buffers()  # glibc's mmap threshold as the server's processes set it
    intake, model = pipelines()
    jpeg = photo()
    arena = bytearray(2 << 20)
    forms = {"BMP (main)": bmp_form(intake, model, jpeg, arena), "pixels": pixel_form(intake, model, jpeg, arena)}
    for sides in forms.values():  # warm up
        timed(*sides, 20)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in forms}
    names = list(forms)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            results[name].append(timed(*forms[name], args.images))
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, {len(jpeg)} B JPEG 640x480"
    )
    print(f"{args.rounds} interleaved rounds of {args.images} images; µs of CPU per image, median [min-max]")
    print("| form | intake | model process |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        cells = []
        for column in (0, 1):
            values = [row[column] for row in rows]
            cells.append(f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
