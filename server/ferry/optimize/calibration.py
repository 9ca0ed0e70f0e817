"""Calibration and evaluation batches made by the model's own image pipeline.

Images go through exactly the code the server runs for ``/classify`` and BYTES inputs
(``ImagePipeline.prepare``: decode, then pre-process), so the ranges INT8 is calibrated on are the
ranges it will see in service.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader
from tqdm import tqdm

from ..errors import FerryError
from ..pipelines.preprocess import ImageTransform
from ..pipelines.runtime import ImagePipeline

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})


class OptimizeError(FerryError):
    """A problem with what ``ferry optimize`` was asked to do (bad paths, too few images, ...)."""


def image_files(directory: Path, limit: int | None = None) -> list[Path]:
    """Image files under ``directory`` (recursively, sorted for a reproducible order)."""
    if not directory.is_dir():
        raise OptimizeError(f"image directory {directory} does not exist")
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise OptimizeError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under {directory}")
    return files[:limit] if limit else files


def image_batches(
    pipeline: ImagePipeline, files: Sequence[Path], batch_size: int, description: str | None = None
) -> Iterator[tuple[np.ndarray, list[ImageTransform]]]:
    """(batch tensor, transforms) for consecutive groups of ``files``, with a progress bar."""
    # disable=None: no bar when stderr is not a terminal, so a bar never runs into log lines
    disable = True if description is None else None
    with tqdm(total=len(files), desc=description, unit="img", disable=disable, leave=False) as bar:
        for start in range(0, len(files), batch_size):
            chunk = files[start : start + batch_size]
            try:
                prepared = pipeline.prepare([path.read_bytes() for path in chunk])
            except FerryError as exc:
                raise OptimizeError(f"{chunk[0].parent}: {exc}") from None
            bar.update(len(chunk))
            if isinstance(prepared.batch, list):  # a variable-size input: one batch per run of one size
                for images, tensor in pipeline.executions(prepared.batch):
                    yield (tensor if tensor.ndim == 4 else tensor[None]), prepared.transforms[images]
            else:
                yield prepared.batch, prepared.transforms


class PipelineCalibrationReader(CalibrationDataReader):
    """Feeds onnxruntime's calibrator one pre-processed batch at a time (never all images at once)."""

    def __init__(
        self, pipeline: ImagePipeline, files: Sequence[Path], batch_size: int, show_progress: bool = True
    ) -> None:
        batches = image_batches(pipeline, files, batch_size, "calibrating" if show_progress else None)
        # one feed per model execution: a model without a batch dimension takes one image, as declared
        self._feeds = (
            {pipeline.input_name: tensor} for batch, _ in batches for _, tensor in pipeline.executions(batch)
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


class TensorCalibrationReader(CalibrationDataReader):
    """Calibration from ready tensors (an .npy file) for models without an image pipeline."""

    def __init__(self, input_name: str, samples: np.ndarray, batch_size: int) -> None:
        self._items = iter([{input_name: samples[i : i + batch_size]} for i in range(0, len(samples), batch_size)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)
