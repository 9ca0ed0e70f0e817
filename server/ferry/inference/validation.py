"""Requests checked against a model's config, and tensors moved between the config's and the engine's shapes."""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidArgument
from ..repository.model import ModelSpec
from ..types import InferenceRequest, TensorSpec

#: ``priority`` and ``timeout`` are uint64 in Triton's API; a larger number could not even be handed
#: to a model process (its JSON hand-off holds 64-bit integers).
UINT64_MAX = 2**64 - 1


def int_parameter(request: InferenceRequest, key: str) -> int | None:
    """An unsigned 64-bit request parameter (``priority``, ``timeout``), or None when absent."""
    value = request.parameters.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT64_MAX:
        raise InvalidArgument(f"request parameter '{key}' must be an integer between 0 and {UINT64_MAX}, got {value!r}")
    return value


def check_requested_outputs(model: ModelSpec, request: InferenceRequest) -> None:
    """Every output the request names is one the model produces."""
    for output in request.outputs or ():
        if output.name not in model.outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{model.name}' "
                f"(outputs: {', '.join(model.outputs)})"
            )


def engine_input(spec: TensorSpec, array: np.ndarray, batched: bool) -> np.ndarray:
    """An input as the engine takes it: Triton's ``reshape`` applied (the batch dim kept)."""
    if spec.reshape is None:
        return array
    return array.reshape((array.shape[0], *spec.reshape) if batched else spec.reshape)


def engine_output(spec: TensorSpec, array: np.ndarray, batch_size: int, batched: bool) -> np.ndarray:
    """An output as the config declares it: the engine's shape undone when ``reshape`` is set."""
    if spec.reshape is None:
        return array
    return array.reshape((batch_size, *spec.dims) if batched else spec.dims)


def as_batch_of_one(array: np.ndarray) -> np.ndarray:
    """One execution's output of a model that cannot batch, with a leading image axis of 1: a
    declared leading 1 (output ``[1, K]``) already is that axis."""
    return array if array.ndim > 1 and array.shape[0] == 1 else array[np.newaxis]


def _dims_match(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims, strict=False))


def _missing_inputs(model: ModelSpec, request: InferenceRequest, missing: list[str]) -> str:
    """Triton's words for required inputs a request left out."""
    required = sum(not spec.optional for spec in model.inputs.values())
    expected = (
        f"{len(model.inputs)} inputs"
        if required == len(model.inputs)
        else f"number of inputs between {required} and {len(model.inputs)}"
    )
    given = ",".join(f"'{name}'" for name in request.inputs)
    wanted = ",".join(f"'{name}'" for name in missing)
    return (
        f"expected {expected} but got {len(request.inputs)} inputs for model '{model.name}'. Got input(s) "
        f"[{given}], but missing required input(s) [{wanted}]. Please provide all required input(s)."
    )


def check_input_names(model: ModelSpec, request: InferenceRequest) -> None:
    """Every input the request names is one the model takes, and none it requires is missing."""
    for name in request.inputs:
        if name not in model.inputs:
            raise InvalidArgument(
                f"unexpected inference input '{name}' for model '{model.name}' (inputs: {', '.join(model.inputs)})"
            )
    missing = [n for n, s in model.inputs.items() if n not in request.inputs and not s.optional]
    if missing:
        raise InvalidArgument(_missing_inputs(model, request, missing))


def check_before_decoding(model: ModelSpec, request: InferenceRequest) -> None:
    """What can be refused before a single image is decoded: the input names, the requested
    outputs, ``priority`` and ``timeout`` (the image input's count against ``max_batch_size`` is
    ``ImageInput``'s, which knows whether the path splits)."""
    check_input_names(model, request)
    check_requested_outputs(model, request)
    int_parameter(request, "priority")
    int_parameter(request, "timeout")


def validate_inputs(
    model: ModelSpec, request: InferenceRequest, max_variable_elements: int = 0
) -> tuple[dict[str, np.ndarray], int]:
    """Check request inputs against the config; returns the engine's inputs and the batch size.

    ``max_variable_elements`` bounds each batch item of an input whose dims vary (0: no bound)."""
    check_input_names(model, request)
    batched = model.max_batch_size > 0
    batch_size = 1
    batch_sizes: dict[str, int] = {}
    prepared: dict[str, np.ndarray] = {}
    for name, array in request.inputs.items():
        spec = model.inputs[name]
        datatype = request.input_datatypes.get(name, spec.datatype)
        if datatype != spec.datatype:
            raise InvalidArgument(
                f"input '{name}' of model '{model.name}': expected datatype {spec.datatype}, got {datatype}"
            )
        shape = tuple(array.shape)
        if batched:
            if len(shape) != len(spec.dims) + 1 or not _dims_match(shape[1:], spec.dims):
                raise InvalidArgument(
                    f"input '{name}' of model '{model.name}': expected shape {[-1, *spec.dims]} "
                    f"(batch first), got {list(shape)}"
                )
            if shape[0] < 1 or shape[0] > model.max_batch_size:
                raise InvalidArgument(
                    f"input '{name}': batch size {shape[0]} is outside 1..{model.max_batch_size}, "
                    f"the max_batch_size of model '{model.name}'"
                )
            batch_sizes[name] = shape[0]
        elif not _dims_match(shape, spec.dims):
            raise InvalidArgument(
                f"input '{name}' of model '{model.name}': expected shape {list(spec.dims)}, got {list(shape)}"
            )
        if name not in request.preprocessed:
            _check_variable_size(model, name, shape[1:] if batched else shape, max_variable_elements)
        prepared[name] = engine_input(spec, array, batched)
    if batch_sizes:
        sizes = set(batch_sizes.values())
        if len(sizes) > 1:
            raise InvalidArgument(
                f"inputs of model '{model.name}' disagree on the batch size: "
                + ", ".join(f"{n}={b}" for n, b in batch_sizes.items())
            )
        batch_size = sizes.pop()
    return prepared, batch_size


def _check_variable_size(model: ModelSpec, name: str, item: tuple[int, ...], limit: int) -> None:
    """Refuse a batch item of an input with -1 dims past ``limit`` elements, before the model runs:
    what its run holds grows with it, beyond what the request sent (a 0.2 MB gzip body of a
    [1, 3, 2048, 2048] page made PP-OCR's detector hold +700 MB). The caller exempts the inputs the
    server made itself (``InferenceRequest.preprocessed``), which are bounded where they were made."""
    spec = model.inputs[name]
    limit = model.max_variable_elements or limit
    if limit <= 0 or -1 not in spec.dims:
        return
    elements = math.prod(item)
    if elements > limit:
        raise InvalidArgument(
            f"input '{name}' of model '{model.name}': {list(item)} is {elements} elements per batch item where its "
            f"dims {list(spec.dims)} vary, more than the limit of {limit} (parameters 'max_variable_elements' of the "
            "model, or --max-variable-input-elements)"
        )
