"""Building an OCR model's (``ferry.ocr``) version: read its settings, load the three composing models it
names (as an ensemble loads its steps) and check they have the inputs and outputs OCR needs."""

from __future__ import annotations

import time
from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import FerryError, ModelLoadError
from ..ocr.scheduler import OcrScheduler
from ..ocr.settings import INPUT, OUTPUTS, ocr_settings
from ..statistics import ModelStats
from .config import tensor_specs, validate_config
from .ensemble_loader import ComposingModels
from .model import ModelVersion, new_version

#: Decoded pages above this many pixels are refused (as the image endpoints' default).
MAX_PIXELS = 40_000_000


async def load_ocr(
    model_dir: Path, version: int, config: mc.ModelConfig, source: str, models: ComposingModels
) -> ModelVersion:
    """The READY-to-serve version of an OCR model."""
    started = time.perf_counter()
    config = mc.ModelConfig.FromString(config.SerializeToString())
    if not config.name:
        config.name = model_dir.name
    validate_config(config, source)
    settings = ocr_settings(config, source)
    inputs = {s.name: s for s in tensor_specs(config.input, "input", source)}
    outputs = {s.name: s for s in tensor_specs(config.output, "output", source)}
    if list(inputs) != [INPUT] or inputs[INPUT].datatype != "BYTES":
        raise ModelLoadError(f"{source}: an OCR model takes one input '{INPUT}' of TYPE_STRING (the encoded page)")
    if config.max_batch_size != 0:
        raise ModelLoadError(f"{source}: an OCR model reads one page per request: set max_batch_size: 0")
    missing = sorted(set(outputs) - set(OUTPUTS))
    if missing:
        raise ModelLoadError(f"{source}: an OCR model has no output {', '.join(missing)} (it has {', '.join(OUTPUTS)})")
    names = (settings.detector, settings.angle_classifier, settings.recognizer)
    for name in names:
        try:
            await models.ensure_loaded(name)
            model = models.get(name, "")
        except FerryError as exc:
            raise ModelLoadError(f"{source}: OCR model '{config.name}': '{name}': {exc.message}") from None
        if len(model.inputs) != 1 or len(model.outputs) != 1:
            raise ModelLoadError(f"{source}: OCR model '{config.name}': '{name}' must have one input and one output")
    schedulers: list[OcrScheduler] = []

    def scheduler(stats: ModelStats) -> OcrScheduler:
        schedulers.append(OcrScheduler(config.name, settings, models, stats, MAX_PIXELS, models.workers.image))
        return schedulers[-1]

    built = new_version(config, version, model_dir, started, scheduler, source, composing_models=names)
    schedulers[0].models()  # the recogniser's dictionary is read per request; check the models now
    return built
