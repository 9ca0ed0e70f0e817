"""Building an ensemble's model version: plan the steps, load and check the composing models.

As in Triton, loading an ensemble loads the composing models it needs that are not loaded yet,
and fails (naming the step) when one cannot be loaded or does not fit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from ferry_client.protocol import model_config_pb2 as mc

from ..ensembles.compose import check_composition
from ..ensembles.plan import plan_ensemble
from ..ensembles.scheduler import EnsembleScheduler
from ..ensembles.step import StepModel
from ..errors import FerryError, ModelLoadError
from .config import validate_config
from .model import ModelVersion, config_tensors, new_version


class ComposingModels(Protocol):
    """What the loader needs from the model manager."""

    async def ensure_loaded(self, name: str) -> None: ...

    def get(self, name: str, version: str = "") -> StepModel: ...


async def load_ensemble(
    model_dir: Path, version: int, config: mc.ModelConfig, source: str, models: ComposingModels
) -> ModelVersion:
    """The READY-to-serve version of an ensemble (its scheduler runs the steps)."""
    started = time.perf_counter()
    config = mc.ModelConfig.FromString(config.SerializeToString())  # each version owns its copy
    if not config.name:
        config.name = model_dir.name
    validate_config(config, source)
    plan = plan_ensemble(config, source)
    inputs, outputs = config_tensors(config, source)
    where = f"{source}: ensemble '{config.name}'"
    resolved: dict[int, StepModel] = {}
    for step in plan.steps:
        try:
            await models.ensure_loaded(step.model_name)
            resolved[step.index] = models.get(step.model_name, step.version)
        except FerryError as exc:
            raise ModelLoadError(f"{where}: {step.label}: {exc.message}") from None
    check_composition(plan, inputs, outputs, config.max_batch_size, resolved, where)
    return new_version(
        config,
        version,
        model_dir,
        started,
        lambda stats: EnsembleScheduler(plan, inputs, outputs, config.max_batch_size, models.get, stats),
        source,
        composing_models=plan.model_names,
    )
