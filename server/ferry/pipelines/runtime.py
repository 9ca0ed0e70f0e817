"""A model's image pipeline as the server runs it: encoded images in, a batch tensor out, and the
model's outputs turned into classes or detections in the caller's pixels.

Built once per model version from its ``ferry_image`` config; decoding and pre-processing run in
a worker thread (Pillow and OpenCV release the GIL), each image written straight into one batch
buffer, or, with ``preprocess { device: GPU }``, the decoded batch resized and normalised on the GPU
by torch. A model that cannot batch (``max_batch_size: 0``, input ``[1, 3, H, W]`` or ``reshape``)
gets one image per execution (``ImagePipeline.executions``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ..batches import execution_slices
from ..cli_errors import install_hint
from ..errors import FerryError, InvalidArgument, ModelLoadError
from ..types import TensorSpec
from . import handed_images
from .classification import softmax, top_k
from .decode import ImageHeader, decode_image, device_decodable, read_header
from .decoders import Decoder, InputSize
from .detection import DEFAULT_MAX_DETECTIONS, Detection, decode_detections, load_decoder
from .detection_tensors import detection_tensor_specs, detection_tensors
from .device_pixels import DevicePixels
from .embedding import EMBEDDING_OUTPUT, check_embedding, embedding_tensor_spec, embeddings
from .normalise import pad_to
from .preprocess import ImageTransform, Placement, PreprocessSpec, pixels_of, preprocess, to_model_mode
from .resize_bounds import checked_placement
from .text_recognition import recognise, recognition_characters, recognition_tensor_specs

_DET = mc.FerryDetection
#: Detection formats whose boxes do not depend on a fixed input size: usable with a variable-size input.
_ANY_SIZE_FORMATS = (_DET.DBNET, _DET.YOLOV8, _DET.END_TO_END, _DET.BOXES_SCORES_CLASSES)
#: Resize modes that stretch the whole image over the input (what a DBNET map is mapped back by).
_WHOLE_IMAGE_RESIZES = (mc.FerryPreprocess.EXACT, mc.FerryPreprocess.LIMIT_SIDE)

DEFAULT_MAX_PIXELS = 40_000_000


class BatchDecoder(Protocol):
    """Decodes a request's JPEGs on the pre-processing device (``device_decode.DeviceJpegDecoder``)."""

    def takes(self, header: ImageHeader | None, max_pixels: int) -> bool: ...

    def decode(self, images: Sequence[bytes]) -> list[Any] | None: ...


class BatchPreprocessor(Protocol):
    """Resizes and normalises a decoded batch on a device (``device_preprocess.DevicePreprocessor``)."""

    @property
    def device(self) -> Any: ...

    @property
    def decoder(self) -> BatchDecoder | None: ...

    def __call__(self, images: Sequence[Any], placements: Sequence[Placement], on_device: bool = False) -> Any:
        """The batch as numpy, or with ``on_device`` as a tensor on the device (``Memory.DEVICE``)."""


@dataclass(frozen=True)
class Prepared:
    """A decoded and pre-processed batch, with the geometry needed to map results back: one array
    (a torch tensor on the pre-processing device when ``prepare`` was asked to keep it there), or for
    a variable-size input (``PreprocessSpec.variable_size``) one tensor per image."""

    batch: np.ndarray | list[np.ndarray] | Any
    transforms: list[ImageTransform]
    decode_ns: int
    preprocess_ns: int


@dataclass(frozen=True)
class ImagePipeline:
    input_name: str
    #: None when the input takes encoded images as they are (BYTES): only the post-stages apply.
    spec: PreprocessSpec | None
    classification: mc.FerryClassification | None
    detection: mc.FerryDetection | None
    output_names: list[str]
    labels: list[str] | None
    max_pixels: int
    #: Resizes and normalises a decoded batch on a device (device: GPU); None: per image on the CPU.
    batch_preprocessor: BatchPreprocessor | None = None
    #: The image input's dims as the config declares them (batch dim excluded), e.g. [1, 3, H, W]
    #: for a model that takes exactly one image and cannot batch.
    input_dims: tuple[int, ...] = ()
    #: The model's max_batch_size: 0 means one image per execution.
    max_batch_size: int = 0
    #: The detector family's decoder, its output shapes checked at load (detection only).
    decoder: Decoder | None = None
    #: The decoded detections a V2 infer request may ask for by name, besides the raw outputs
    #: (``detection_tensors``; detection only, and never shadowing an output of the model), or
    #: the embedding vectors (``EMBEDDING``).
    decoded_outputs: dict[str, TensorSpec] = field(default_factory=dict)
    #: Set for embedding models (``embed``).
    embedding: mc.FerryEmbedding | None = None
    #: Set for CTC text recognisers (``recognize``), with the class index to character table.
    text_recognition: mc.FerryTextRecognition | None = None
    characters: list[str] | None = None

    @classmethod
    def from_config(
        cls,
        config: mc.ModelConfig,
        inputs: dict[str, TensorSpec],
        outputs: dict[str, TensorSpec],
        labels: dict[str, list[str]],
        max_pixels: int = DEFAULT_MAX_PIXELS,
        gpu: int = 0,
        on_device: bool = True,
    ) -> ImagePipeline | None:
        """The pipeline a config asks for, or None when it has no ``ferry_image`` section.

        ``gpu`` is the device that ``preprocess { device: GPU }`` runs on; ``on_device`` False builds
        such a pipeline without its device pre-processor (an intake process, which ``hand_over``s the
        images to the model process that has it).
        """
        if not config.HasField("ferry_image"):
            return None
        image = config.ferry_image
        input_name = image.input or next(iter(inputs))
        if input_name not in inputs:
            raise ModelLoadError(f"ferry_image.input '{input_name}' is not an input of the model")
        input_dims = inputs[input_name].dims
        classification = image.classification if image.HasField("classification") else None
        detection = image.detection if image.HasField("detection") else None
        embedding = image.embedding if image.HasField("embedding") else None
        recognition = image.text_recognition if image.HasField("text_recognition") else None
        if sum(task is not None for task in (classification, detection, embedding, recognition)) > 1:
            raise ModelLoadError("ferry_image: set one of classification, detection, embedding and text_recognition")
        spec: PreprocessSpec | None = None
        if inputs[input_name].datatype == "BYTES":
            # The model decodes the images itself (a Python model): no pre-processing to run,
            # and no input size to map boxes back with.
            if image.HasField("preprocess"):
                raise ModelLoadError(
                    f"ferry_image.preprocess: input '{input_name}' takes encoded images (BYTES); "
                    "the model decodes them itself, so there is nothing to pre-process"
                )
            if detection is not None:
                raise ModelLoadError(
                    f"ferry_image.detection: input '{input_name}' takes encoded images (BYTES), so Ferry "
                    "does not know the model's input size to map boxes back; declare classification, "
                    "or give the model a tensor input with ferry_image.preprocess"
                )
        else:
            spec = PreprocessSpec.from_config(
                image.preprocess,
                image_dims(input_dims, config.max_batch_size),
                inputs[input_name].datatype,
                detection.format if detection is not None else None,
            )
        if detection is not None:
            names = list(detection.outputs) or list(outputs)
        elif embedding is not None:
            names = [embedding.output or next(iter(outputs))]
            check_embedding(embedding, outputs[names[0]].dims, config.max_batch_size)
        elif recognition is not None:
            names = [recognition.output or next(iter(outputs))]
        else:
            names = [classification.output if classification and classification.output else next(iter(outputs))]
        for name in names:
            if name not in outputs:
                raise ModelLoadError(f"ferry_image: output '{name}' is not an output of the model")
        batch_preprocessor = (
            _gpu_preprocessor(spec, gpu)
            if on_device and spec is not None and spec.device == mc.FerryPreprocess.GPU
            else None
        )
        decoder = None
        decoded_outputs: dict[str, TensorSpec] = {}
        characters = None
        if recognition is not None:
            dims = outputs[names[0]].dims
            characters = recognition_characters(
                recognition, names[0], dims, labels.get(names[0]), config.max_batch_size
            )
            decoded_outputs = {k: v for k, v in recognition_tensor_specs().items() if k not in outputs}
        if embedding is not None and EMBEDDING_OUTPUT not in outputs:
            decoded_outputs = {
                EMBEDDING_OUTPUT: embedding_tensor_spec(embedding, outputs[names[0]].dims, config.max_batch_size)
            }
        if detection is not None and spec is not None:
            shapes = [_batched_shape(outputs[name].dims, config.max_batch_size > 0) for name in names]
            try:
                decoder = load_decoder(detection, names, shapes, InputSize(spec.width, spec.height))
            except FerryError as exc:
                raise ModelLoadError(str(exc)) from None
            if spec.variable_size and detection.format not in _ANY_SIZE_FORMATS:
                name = mc.FerryDetection.DetectionFormat.Name(detection.format)
                raise ModelLoadError(
                    f"ferry_image.detection.format: {name} needs a fixed input size (its boxes are laid out on it); "
                    f"a variable-size input (resize: {mc.FerryPreprocess.ResizeMode.Name(spec.resize)}) takes "
                    f"{', '.join(mc.FerryDetection.DetectionFormat.Name(f) for f in _ANY_SIZE_FORMATS)}"
                )
            if decoder.polygons and spec.resize not in _WHOLE_IMAGE_RESIZES:
                raise ModelLoadError(
                    f"ferry_image.detection.format: DBNET maps its map onto the whole image, so it needs resize: "
                    f"LIMIT_SIDE or EXACT, not {mc.FerryPreprocess.ResizeMode.Name(spec.resize)}"
                )
            limit = _detection_limit(detection, decoder)
            specs = detection_tensor_specs(limit, int(detection.num_keypoints), decoder.polygons)
            decoded_outputs = {name: spec for name, spec in specs.items() if name not in outputs}
        return cls(
            input_name,
            spec,
            classification,
            detection,
            names,
            labels.get(names[0]),
            (spec.max_pixels if spec is not None else 0) or max_pixels,
            batch_preprocessor,
            tuple(input_dims),
            config.max_batch_size,
            decoder,
            decoded_outputs,
            embedding,
            recognition,
            characters,
        )

    @property
    def task(self) -> str:
        if self.detection is not None:
            return "detect"
        if self.text_recognition is not None:
            return "recognize"
        return "embed" if self.embedding is not None else "classify"

    @property
    def declares_classes(self) -> bool:
        """A classifier names its classes: labels on its output or a ``classification`` section.
        A bare ``ferry_image`` on an unlabelled output (an embedding model) does not, and /classify
        would only rank softmaxed features."""
        return self.classification is not None or bool(self.labels)

    def waits_for_batch(self, on_device: bool) -> bool:
        """Whether ``prepare`` leaves a device pre-processor's work to the batcher (``DevicePixels``):
        the request's decoded pixels then wait, all of them, for their batch."""
        spec = self.spec
        return (
            on_device
            and self.batch_preprocessor is not None
            and self.max_batch_size > 0
            and spec is not None
            and not spec.variable_size
        )

    def prepare(self, images: Sequence[bytes | np.ndarray], first_index: int = 0, on_device: bool = False) -> Prepared:
        """Decode and pre-process every image into one contiguous batch (blocking; run in a thread).

        ``images``: encoded, or with a device pre-processor also as an intake decoded them
        (``hand_over``: (H, W, C) uint8 pixels, taken as they are). ``first_index`` is the position
        of ``images[0]`` in the request, for error messages.
        ``on_device``: the caller's scheduler takes device inputs, so a device pre-processor's work
        is left to the batcher (``DevicePixels``: decoded and placed here, pre-processed once per
        batch) where the model batches images of one size, else its batch stays a tensor on the
        device; without a device pre-processor it changes nothing."""
        if not images:
            raise InvalidArgument("no images in the request")
        spec = self.spec
        assert spec is not None, "prepare needs a pre-processing spec (an input that is not BYTES)"
        if self.batch_preprocessor is not None:
            return self._prepare_on_device(images, spec, self.batch_preprocessor, first_index, on_device)
        batch: np.ndarray | list[np.ndarray]
        batch = [] if spec.variable_size else np.empty((len(images), *spec.tensor_shape), dtype=spec.dtype)
        transforms = []
        decode_ns = preprocess_ns = 0
        for index, data in enumerate(images):
            t0 = time.perf_counter_ns()
            image = decode_image(
                bytes(data), max_pixels=self.max_pixels, target_size=spec.draft_size, index=first_index + index
            )
            t1 = time.perf_counter_ns()
            where = checked_placement(*image.size, spec, self.max_pixels, first_index + index)
            tensor, transform = preprocess(image, spec, where)
            if isinstance(batch, list):
                batch.append(tensor)
            else:
                batch[index] = tensor
            preprocess_ns += time.perf_counter_ns() - t1
            decode_ns += t1 - t0
            transforms.append(transform)
        return Prepared(batch, transforms, decode_ns, preprocess_ns)

    def _prepare_on_device(
        self,
        images: Sequence[bytes | np.ndarray],
        spec: PreprocessSpec,
        preprocessor: BatchPreprocessor,
        first_index: int,
        on_device: bool,
    ) -> Prepared:
        """Decode (and convert the colour mode) on the CPU, or with ``decode: GPU`` the JPEGs the device
        takes on the device, then resize and normalise the batch at once. A batch the device decoder
        refuses is decoded on the CPU, whose error names the image it refuses. Pixels an intake
        decoded are taken as they are."""
        t0 = time.perf_counter_ns()
        pixels: list[Any] = [_decoded(data) for data in images]
        decoder = preprocessor.decoder
        if decoder is not None:
            chosen = [
                i
                for i, data in enumerate(images)
                if pixels[i] is None and decoder.takes(read_header(bytes(data)), self.max_pixels)
            ]
            decoded = decoder.decode([bytes(images[i]) for i in chosen]) if chosen else None
            for index, tensor in zip(chosen, decoded or (), strict=False):
                pixels[index] = tensor
        placements = []
        for index, data in enumerate(images):
            if pixels[index] is None:
                image = decode_image(
                    bytes(data), max_pixels=self.max_pixels, target_size=spec.draft_size, index=first_index + index
                )
                image = to_model_mode(image, spec)
                pixels[index] = pixels_of(image)
            height, width = pixels[index].shape[:2]
            placements.append(checked_placement(width, height, spec, self.max_pixels, first_index + index))
        t1 = time.perf_counter_ns()
        transforms = [where.transform for where in placements]
        if self.waits_for_batch(on_device):
            waiting = DevicePixels(pixels, placements, preprocessor, spec.tensor_shape, spec.datatype)
            return Prepared(waiting, transforms, t1 - t0, 0)
        batch = preprocessor(pixels, placements, on_device)
        return Prepared(batch, transforms, t1 - t0, time.perf_counter_ns() - t1)

    def hand_over(self, images: Sequence[bytes]) -> tuple[list[tuple[slice, np.ndarray]], list[ImageTransform]]:
        """For a model that pre-processes on its device, in an intake process (blocking; run in a
        thread): the images as the model process takes them without decoding them, one tensor per
        execution of at most ``max_batch_size`` (``handed_images.pack``), with the transform each
        image will get. JPEGs its device decodes (``decode: GPU``) go as they are; the others are
        decoded here, turned upright and into the model's colour mode, and go as their (H, W, C)
        uint8 pixels."""
        spec = self.spec
        assert spec is not None and spec.device == mc.FerryPreprocess.GPU
        executions, transforms = [], []
        for one in execution_slices(len(images), self.max_batch_size):
            handed: list[np.ndarray | bytes] = []
            for index in range(one.start, one.stop):
                data = bytes(images[index])
                header = read_header(data) if spec.decode == mc.FerryPreprocess.GPU else None
                if header is not None and device_decodable(header, self.max_pixels):
                    swap = header.may_swap
                    width, height = (header.height, header.width) if swap else (header.width, header.height)
                    handed.append(data)
                else:
                    image = decode_image(data, max_pixels=self.max_pixels, target_size=spec.draft_size, index=index)
                    pixels = pixels_of(to_model_mode(image, spec))
                    height, width = pixels.shape[:2]
                    handed.append(pixels)
                transforms.append(checked_placement(width, height, spec, self.max_pixels, index).transform)
            executions.append((one, handed_images.pack(handed)))
        return executions, transforms

    def executions(self, batch: np.ndarray | list[np.ndarray]) -> list[tuple[slice, np.ndarray]]:
        """Split a prepared batch into model executions: which images, and the input tensor as the
        config declares it (with the batch dim when the model batches; Triton's reshape is the data
        plane's to apply). A model that cannot batch gets one image per execution. Tensors of a
        variable-size input share an execution only with neighbours of the same size, unless
        ``pad_to_batch`` pads each execution's images to its largest."""
        if isinstance(batch, list):
            assert self.spec is not None
            if self.spec.pad_to_batch and self.max_batch_size > 0:
                spec = self.spec
                return [(one, pad_to(batch[one], spec)) for one in execution_slices(len(batch), self.max_batch_size)]
            return _runs_of_one_size(batch, self.max_batch_size, self.input_dims)
        if self.max_batch_size > 0:
            return [(one, batch[one]) for one in execution_slices(len(batch), self.max_batch_size)]
        return [(one, batch[one.start].reshape(self.input_dims)) for one in execution_slices(len(batch), 0)]

    def classify(self, outputs: dict[str, np.ndarray], k: int | None = None) -> list[list[dict]]:
        """Top-k classes per image as {index, label, score} (softmax applied when configured)."""
        logits = outputs[self.output_names[0]].reshape(len(outputs[self.output_names[0]]), -1)
        scores = softmax(logits) if self.classification is None or self.classification.softmax else logits
        default = self.classification.top_k if self.classification and self.classification.top_k else 5
        count = default if k is None else k  # 0 is a mistake to report, not "the default"
        if count < 1:
            raise InvalidArgument(f"top_k must be >= 1, got {count}")
        indices, values = top_k(scores, min(count, scores.shape[1]))
        return [
            [
                {"index": int(i), "label": self._label(int(i)), "score": float(v)}
                for i, v in zip(row_i, row_v, strict=True)
            ]
            for row_i, row_v in zip(indices, values, strict=True)
        ]

    def embed(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """One vector per image (pooled, L2-normalised as configured), float32 [images, D]."""
        assert self.embedding is not None
        return embeddings(outputs[self.output_names[0]], self.embedding, self.max_batch_size)

    def recognize(self, outputs: dict[str, np.ndarray]) -> list[tuple[str, float]]:
        """Each line's text and confidence (CTC greedy over the dictionary)."""
        assert self.characters is not None
        return recognise(np.asarray(outputs[self.output_names[0]]), self.characters)

    def detect(
        self,
        outputs: dict[str, np.ndarray],
        transforms: list[ImageTransform],
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_detections: int | None = None,
    ) -> list[list[Detection]]:
        assert self.detection is not None
        return decode_detections(
            outputs,
            self.detection,
            self.output_names,
            transforms,
            self.labels,
            score_threshold,
            iou_threshold,
            max_detections,
            self.decoder,
        )

    def detection_tensors(
        self, outputs: dict[str, np.ndarray], transforms: list[ImageTransform]
    ) -> dict[str, np.ndarray]:
        """``detect``'s detections (config thresholds) as the ``decoded_outputs`` tensors."""
        assert self.detection is not None
        found = self.detect(outputs, transforms)
        assert self.decoder is not None
        limit = _detection_limit(self.detection, self.decoder)
        return detection_tensors(found, limit, int(self.detection.num_keypoints), self.decoder.polygons)

    def _label(self, index: int) -> str | None:
        if self.labels and index < len(self.labels):
            return self.labels[index]
        return None


def _runs_of_one_size(
    tensors: list[np.ndarray], limit: int, input_dims: tuple[int, ...]
) -> list[tuple[slice, np.ndarray]]:
    """Executions of consecutive images whose tensors have one shape (at most ``limit`` each; one
    image each when the model cannot batch), so results stay in image order."""
    runs: list[tuple[slice, np.ndarray]] = []
    start = 0
    while start < len(tensors):
        end = start + 1
        while limit > 0 and end < len(tensors) and end - start < limit and tensors[end].shape == tensors[start].shape:
            end += 1
        if limit > 0:
            runs.append((slice(start, end), np.stack(tensors[start:end])))
        else:
            one = tensors[start]
            runs.append((slice(start, end), one if len(input_dims) == one.ndim else one[None]))
        start = end
    return runs


def _detection_limit(detection: mc.FerryDetection, decoder: Decoder) -> int:
    """K, the detection rows per image: the config's ``max_detections``, as ``detect`` applies it."""
    return int(detection.max_detections) or decoder.default_max_detections or DEFAULT_MAX_DETECTIONS


def _decoded(image: bytes | np.ndarray) -> np.ndarray | None:
    """An image an intake handed over decoded ((H, W, C) pixels), or None for encoded bytes."""
    return image if isinstance(image, np.ndarray) and image.ndim == 3 else None


def _batched_shape(dims: Sequence[int], batched: bool) -> tuple[int, ...]:
    """An output's shape as the decoder sees it, batch first: a model that cannot batch either
    declares its fixed batch of one (``[1, ...]``) or gets one added per image."""
    if not batched and len(dims) > 1 and dims[0] == 1:
        return tuple(dims)
    return (-1, *dims)


def _gpu_preprocessor(spec: PreprocessSpec, gpu: int) -> BatchPreprocessor:
    """The torch batch pre-processor on ``cuda:<gpu>``; a load error where torch or CUDA is missing."""
    field = "ferry_image.preprocess.device"
    try:
        import torch

        from .device_preprocess import DevicePreprocessor
    except ImportError as exc:
        raise ModelLoadError(f"{field}: GPU needs torch ({exc}); {install_hint('torch')}") from None
    if not torch.cuda.is_available():
        raise ModelLoadError(
            f"{field}: GPU, but torch {torch.__version__} sees no CUDA device; use device: CPU (the default)"
        )
    if gpu >= torch.cuda.device_count():
        raise ModelLoadError(f"{field}: GPU {gpu} does not exist (torch sees {torch.cuda.device_count()})")
    if spec.decode == mc.FerryPreprocess.GPU:
        from .device_decode import torchvision_problem

        problem = torchvision_problem()
        if problem:
            raise ModelLoadError(
                f"ferry_image.preprocess.decode: GPU needs torchvision built for this torch ({problem}); "
                f"{install_hint('torch')}, or use decode: CPU (the default)"
            )
    return DevicePreprocessor(spec, f"cuda:{gpu}")


def image_dims(dims: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """The dims of one image's tensor: a model that cannot batch may declare a leading 1 (input
    ``[1, 3, H, W]`` with ``max_batch_size: 0``), which is its batch of one, not part of the image."""
    if max_batch_size == 0 and len(dims) == 4 and dims[0] == 1:
        return tuple(dims[1:])
    return tuple(dims)
