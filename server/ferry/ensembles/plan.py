"""An ensemble's steps as a DAG over tensor names, checked without looking at any other model.

Triton's rules: every step names a model and maps its inputs and outputs to ensemble tensors;
each ensemble tensor is produced once (by the request or by one step); every step's inputs can be
produced before it runs (no cycles); every ensemble input is read and every ensemble output is
written. Each violation fails the load with a message naming the step and the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import ModelLoadError

LATEST = -1  # Triton's model_version for "the version the step model's policy serves, highest first"


@dataclass(frozen=True)
class Step:
    """One step: which model, and how its tensor names map to ensemble tensor names."""

    index: int
    model_name: str
    model_version: int
    input_map: dict[str, str]  # step model input -> ensemble tensor
    output_map: dict[str, str]  # step model output -> ensemble tensor

    @property
    def label(self) -> str:
        return f"step {self.index} (model '{self.model_name}')"

    @property
    def version(self) -> str:
        """The version as the model manager takes it ("" = latest)."""
        return "" if self.model_version == LATEST else str(self.model_version)


@dataclass(frozen=True)
class EnsemblePlan:
    """The steps in waves: each wave's steps read only ensemble inputs and earlier waves' outputs."""

    name: str
    waves: tuple[tuple[Step, ...], ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for wave in self.waves for step in wave)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(step.model_name for step in self.steps))

    def pruned(self, outputs: frozenset[str]) -> PrunedPlan:
        """Only the steps that feed ``outputs`` (as Triton, a step nothing asked for never runs),
        each asked only for the outputs something downstream reads."""
        needed = set(outputs)
        wanted: dict[int, list[str]] = {}
        for step in reversed(self.steps):  # waves are in dependency order: consumers come later
            names = [output for output, tensor in step.output_map.items() if tensor in needed]
            if names:
                wanted[step.index] = names
                needed.update(step.input_map.values())
        waves = tuple(w for w in (tuple(s for s in wave if s.index in wanted) for wave in self.waves) if w)
        return PrunedPlan(waves, wanted)


@dataclass(frozen=True)
class PrunedPlan:
    """The steps one set of requested outputs needs, and the step outputs each must produce."""

    waves: tuple[tuple[Step, ...], ...]
    step_outputs: dict[int, list[str]]


_REFUSED_FIELDS = {
    "instance_group": "each step runs on its own model's instances",
    "model_warmup": "warm up the composing models instead",
    "optimization": "set it on the composing models",
}


def is_ensemble(config: mc.ModelConfig) -> bool:
    return config.platform == "ensemble"


def plan_ensemble(config: mc.ModelConfig, source: str) -> EnsemblePlan:
    """Check an ensemble config's steps and order them; raise ModelLoadError naming what is wrong."""
    name = config.name
    where = f"{source}: ensemble '{name}'"
    for field, why in _REFUSED_FIELDS.items():
        if _is_set(config, field):
            raise ModelLoadError(f"{where}: '{field}' is not supported on an ensemble ({why})")
    if config.backend:
        raise ModelLoadError(f"{where}: an ensemble takes no 'backend' (got '{config.backend}')")
    if not config.HasField("ensemble_scheduling"):
        raise ModelLoadError(f"{where}: platform 'ensemble' needs 'ensemble_scheduling {{ step [ ... ] }}'")
    scheduling = config.ensemble_scheduling
    if scheduling.max_inflight_requests:
        raise ModelLoadError(f"{where}: 'ensemble_scheduling.max_inflight_requests' is not supported")
    if not scheduling.step:
        raise ModelLoadError(f"{where}: ensemble_scheduling has no step")
    steps = [_step(index, raw, name, where) for index, raw in enumerate(scheduling.step)]
    inputs = tuple(tensor.name for tensor in config.input)
    outputs = tuple(tensor.name for tensor in config.output)
    _check_producers(steps, inputs, where)
    waves = _waves(steps, set(inputs), where)
    read = {tensor for step in steps for tensor in step.input_map.values()}
    for tensor in inputs:
        if tensor not in read:
            raise ModelLoadError(f"{where}: ensemble input '{tensor}' is not read by any step")
    written = {tensor for step in steps for tensor in step.output_map.values()}
    for tensor in outputs:
        if tensor not in written:
            raise ModelLoadError(f"{where}: ensemble output '{tensor}' is not written by any step")
    return EnsemblePlan(name, waves, inputs, outputs)


def _is_set(config: mc.ModelConfig, field: str) -> bool:
    value = getattr(config, field)
    if isinstance(value, mc.ModelOptimizationPolicy):
        return config.HasField(field)
    return len(value) > 0


def _step(index: int, raw: mc.ModelEnsembling.Step, ensemble: str, where: str) -> Step:
    if not raw.model_name:
        raise ModelLoadError(f"{where}: step {index}: 'model_name' is required")
    step = Step(index, raw.model_name, raw.model_version, dict(raw.input_map), dict(raw.output_map))
    if raw.model_namespace:
        raise ModelLoadError(f"{where}: {step.label}: 'model_namespace' is not supported")
    if raw.model_name == ensemble:
        raise ModelLoadError(f"{where}: {step.label}: an ensemble cannot be a step of itself")
    if raw.model_version < LATEST:
        raise ModelLoadError(
            f"{where}: {step.label}: model_version must be -1 (latest) or a version number, got {raw.model_version}"
        )
    if not step.input_map:
        raise ModelLoadError(f"{where}: {step.label}: 'input_map' is empty")
    if not step.output_map:
        raise ModelLoadError(f"{where}: {step.label}: 'output_map' is empty")
    return step


def _check_producers(steps: list[Step], inputs: tuple[str, ...], where: str) -> None:
    """Each ensemble tensor has one producer: the request (ensemble inputs) or exactly one output."""
    producer: dict[str, str] = {tensor: "the request (ensemble input)" for tensor in inputs}
    for step in steps:
        seen: dict[str, str] = {}
        for output, tensor in sorted(step.output_map.items()):
            if tensor in seen:
                raise ModelLoadError(
                    f"{where}: {step.label}: outputs '{seen[tensor]}' and '{output}' both write ensemble tensor "
                    f"'{tensor}'"
                )
            seen[tensor] = output
            if tensor in producer:
                raise ModelLoadError(
                    f"{where}: ensemble tensor '{tensor}' is written by {producer[tensor]} and by {step.label}"
                )
            producer[tensor] = step.label


def _waves(steps: list[Step], available: set[str], where: str) -> tuple[tuple[Step, ...], ...]:
    """Steps grouped in dependency order (config order within a wave); refuses unreadable inputs."""
    produced = available | {tensor for step in steps for tensor in step.output_map.values()}
    for step in steps:
        for model_input, tensor in step.input_map.items():
            if tensor not in produced:
                raise ModelLoadError(
                    f"{where}: {step.label}: input '{model_input}' reads ensemble tensor '{tensor}', which is "
                    "neither an ensemble input nor written by any step"
                )
    waves: list[tuple[Step, ...]] = []
    remaining = list(steps)
    have = set(available)
    while remaining:
        runnable = tuple(s for s in remaining if set(s.input_map.values()) <= have)
        if not runnable:
            cycle = ", ".join(s.label for s in remaining)
            raise ModelLoadError(f"{where}: circular dependency: {cycle} each wait for another's output")
        waves.append(runnable)
        for step in runnable:
            have.update(step.output_map.values())
            remaining.remove(step)
    return tuple(waves)
