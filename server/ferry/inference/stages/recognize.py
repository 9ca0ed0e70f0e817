"""Post-stages of a CTC text recogniser: each line's text and confidence, for ``/recognize`` (a
``{"text", "score"}`` per image) and for V2 infer (the ``TEXT`` and ``TEXT_SCORE`` tensors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...pipelines.preprocess import ImageTransform
from ...pipelines.runtime import ImagePipeline
from ...pipelines.text_recognition import recognition_tensors
from .pipeline_task import PipelineTask, with_item_axis


class Recognize(PipelineTask):
    """``/recognize`` on a model whose ``ferry_image`` declares ``text_recognition``."""

    cheap = False  # an argmax over thousands of classes per time step

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> list[Any]:
        return [{"text": text, "score": score} for text, score in self.pipeline.recognize(outputs)]


class RecognitionTensors:
    """The ``TEXT`` and ``TEXT_SCORE`` outputs a V2 infer request may ask for, tensors or images."""

    cheap = False

    def __init__(self, pipeline: ImagePipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, outputs: dict[str, np.ndarray], transforms: Sequence[ImageTransform]) -> dict[str, np.ndarray]:
        return recognition_tensors(self.pipeline.recognize(with_item_axis(self.pipeline, outputs, transforms)))
