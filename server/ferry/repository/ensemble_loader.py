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
from ..ensembles.plan import EnsemblePlan, Step, plan_ensemble
from ..ensembles.scheduler import EnsembleScheduler
from ..ensembles.step import ComposingModels as RunningModels
from ..ensembles.step import StepModel
from ..errors import FerryError, ModelLoadError
from ..workers import Workers
from .config import validate_config
from .model import ModelVersion, config_tensors, new_version


class ComposingModels(RunningModels, Protocol):
    """What the loader needs from the model manager (and the scheduler it builds: finding and
    running the steps)."""

    workers: Workers  # the pools a composite model's own CPU work runs on

    async def ensure_loaded(self, name: str) -> None: ...


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
    if _decoupled_step(plan, resolved, where) is not None:
        config.model_transaction_policy.decoupled = True  # its requests stream, as its last step's do
    return new_version(
        config,
        version,
        model_dir,
        started,
        lambda stats: EnsembleScheduler(plan, inputs, outputs, config.max_batch_size, models, stats),
        source,
        inherited_labels=_step_labels(plan, resolved, outputs),
        composing_models=plan.model_names,
    )


def _step_labels(plan: EnsemblePlan, resolved: dict[int, StepModel], outputs: dict) -> dict[str, list[str]]:
    """Labels an ensemble output takes from the composing model output that writes it (as Triton's
    classification extension does), unless the ensemble names a ``label_filename`` of its own."""
    labels: dict[str, list[str]] = {}
    for step in plan.steps:
        step_labels: dict[str, list[str]] = getattr(resolved[step.index], "labels", None) or {}
        for model_output, tensor in step.output_map.items():
            if tensor in outputs and model_output in step_labels:
                labels[tensor] = step_labels[model_output]
    return labels


def _decoupled_step(plan: EnsemblePlan, resolved: dict[int, StepModel], where: str) -> Step | None:
    """The one decoupled step of an ensemble, if any. Its responses become the ensemble's, so it
    must be the last step: nothing reads its outputs, and every ensemble output comes from it."""
    decoupled = [step for step in plan.steps if getattr(resolved[step.index], "decoupled", False)]
    if not decoupled:
        return None
    if len(decoupled) > 1:
        labels = ", ".join(step.label for step in decoupled)
        raise ModelLoadError(f"{where}: only one step may be a decoupled model, not {labels}")
    (last,) = decoupled
    produced = set(last.output_map.values())
    for step in plan.steps:
        read = produced & set(step.input_map.values())
        if read:
            raise ModelLoadError(
                f"{where}: {last.label} is decoupled, so it must be the last step, but {step.label} reads its "
                f"output '{sorted(read)[0]}'"
            )
    for tensor in plan.outputs:
        if tensor not in produced:
            raise ModelLoadError(
                f"{where}: ensemble output '{tensor}' does not come from the decoupled {last.label}: an ensemble "
                "with a decoupled step streams that step's responses, so every output must come from it"
            )
    return last
