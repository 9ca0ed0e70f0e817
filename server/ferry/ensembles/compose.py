"""Checking an ensemble against its composing models: names, data types, shapes, batch sizes.

Run at load and again whenever a composing model is replaced by another version, because the new
version's config may no longer fit. Shapes agree when equal with -1 as a wildcard, or when equal
once the batch dimension is added to a batching model's dims (Triton lets a batching ensemble feed
a non-batching model whose first dim is -1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelLoadError
from ..types import TensorSpec
from .plan import EnsemblePlan
from .step import StepModel


@dataclass(frozen=True)
class _Use:
    """How one side (the ensemble or a step) sees an ensemble tensor."""

    datatype: str
    dims: tuple[int, ...]
    batched: bool
    who: str

    @property
    def full_dims(self) -> tuple[int, ...]:
        return (-1, *self.dims) if self.batched else self.dims


def _wildcard_equal(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _agree(tensor: str, first: _Use, other: _Use, where: str) -> None:
    if first.datatype != other.datatype:
        raise ModelLoadError(
            f"{where}: ensemble tensor '{tensor}' is {first.datatype} for {first.who} but {other.datatype} "
            f"for {other.who}"
        )
    if not _wildcard_equal(first.dims, other.dims) and not _wildcard_equal(first.full_dims, other.full_dims):
        raise ModelLoadError(
            f"{where}: ensemble tensor '{tensor}' has shape {list(first.full_dims)} for {first.who} but "
            f"{list(other.full_dims)} for {other.who}"
        )


def check_composition(
    plan: EnsemblePlan,
    inputs: dict[str, TensorSpec],
    outputs: dict[str, TensorSpec],
    max_batch_size: int,
    models: dict[int, StepModel],
    where: str,
) -> None:
    """Raise ModelLoadError unless every step fits its model and the tensors agree end to end.

    ``models`` maps step index to the resolved composing model version.
    """
    batched = max_batch_size > 0
    uses: dict[str, _Use] = {}

    def use(tensor: str, seen: _Use) -> None:
        if tensor in uses:
            _agree(tensor, uses[tensor], seen, where)
        else:
            uses[tensor] = seen

    for spec in inputs.values():
        use(spec.name, _Use(spec.datatype, spec.reshape or spec.dims, batched, f"ensemble '{plan.name}' input"))
    for step in plan.steps:
        model = models[step.index]
        step_batched = model.max_batch_size > 0
        if step_batched and model.max_batch_size < max_batch_size:
            raise ModelLoadError(
                f"{where}: ensemble '{plan.name}' has max_batch_size {max_batch_size} but {step.label} allows "
                f"only {model.max_batch_size}"
            )
        sides = (("input", step.input_map, model.inputs), ("output", step.output_map, model.outputs))
        for kind, mapping, specs in sides:
            for key, tensor in mapping.items():
                declared = specs.get(key)
                if declared is None:
                    raise ModelLoadError(
                        f"{where}: {step.label}: {kind}_map key '{key}' is not an {kind} of the model "
                        f"({kind}s: {', '.join(specs)})"
                    )
                use(tensor, _Use(declared.datatype, declared.dims, step_batched, f"{step.label} {kind} '{key}'"))
        for name, spec in model.inputs.items():
            if name not in step.input_map and not spec.optional:
                raise ModelLoadError(f"{where}: {step.label}: model input '{name}' is not mapped by input_map")
    for spec in outputs.values():
        use(spec.name, _Use(spec.datatype, spec.reshape or spec.dims, batched, f"ensemble '{plan.name}' output"))
