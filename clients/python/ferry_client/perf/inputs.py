"""Request inputs for the perf tool: random tensors, .npy/.npz/.json files, or a folder of images.

Every source yields a list of samples (input name -> array with the batch dimension), which the
workers cycle through; arrays are encoded to wire bytes once, before the measurement starts.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..codec import numpy_dtype

Sample = dict[str, np.ndarray]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}


@dataclass(frozen=True)
class TensorSpec:
    """One model input as model metadata describes it (shape without the batch dimension)."""

    name: str
    datatype: str
    dims: tuple[int, ...]


def model_inputs(metadata: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[list[TensorSpec], bool]:
    """The model's inputs and whether it batches (``max_batch_size`` > 0 in its config)."""
    batched = int(config.get("max_batch_size", 0) or 0) > 0
    specs = []
    for entry in metadata.get("inputs", []):
        shape = [int(d) for d in entry.get("shape", [])]
        if batched and shape:
            shape = shape[1:]  # metadata includes the batch dimension as -1
        specs.append(TensorSpec(entry["name"], entry["datatype"], tuple(shape)))
    if not specs:
        raise ValueError(f"model '{metadata.get('name', '?')}' declares no inputs in its metadata")
    return specs, batched


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``NAME:d1,d2`` options (perf_analyzer's --shape) as a name -> dims mapping."""
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise ValueError(f"--shape '{item}': expected NAME:D1,D2,... with integer dims") from None
    return shapes


def _dims(spec: TensorSpec, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    dims = shapes.get(spec.name, spec.dims)
    if any(d < 0 for d in dims):
        raise ValueError(
            f"input '{spec.name}' has a variable shape {list(spec.dims)}; "
            f"give one with --shape {spec.name}:{','.join('1' if d < 0 else str(d) for d in spec.dims)}"
        )
    return tuple(dims)


def _random_tensor(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if spec.datatype == "BYTES":
        return np.array(
            [b"ferry-%d" % v for v in rng.integers(0, 1 << 30, size=shape).ravel()], dtype=np.object_
        ).reshape(shape)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    dtype = numpy_dtype("FP32" if spec.datatype == "BF16" else spec.datatype)
    if np.issubdtype(dtype, np.floating):
        return rng.random(size=shape, dtype=np.float32).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


def random_samples(
    specs: Sequence[TensorSpec],
    batched: bool,
    batch_size: int,
    shapes: Mapping[str, tuple[int, ...]],
    count: int = 1,
    seed: int = 0,
) -> list[Sample]:
    """``count`` samples of random values with the model's datatypes and shapes."""
    rng = np.random.default_rng(seed)
    lead = (batch_size,) if batched else ()
    return [{s.name: _random_tensor(s, lead + _dims(s, shapes), rng) for s in specs} for _ in range(count)]


def _batches(items: Mapping[str, np.ndarray], batched: bool, batch_size: int) -> list[Sample]:
    """Cut per-input stacks of items into samples of ``batch_size`` (one item each when not batched)."""
    lengths = {len(a) for a in items.values()}
    if len(lengths) != 1:
        raise ValueError(f"input data: every input needs the same number of items, got {sorted(lengths)}")
    total = lengths.pop()
    step = batch_size if batched else 1
    if total < step:
        raise ValueError(f"input data holds {total} items, fewer than the batch size {step}")
    return [
        {name: (array[i : i + step] if batched else array[i]) for name, array in items.items()}
        for i in range(0, total - step + 1, step)
    ]


def _coerce(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    if spec.datatype == "BYTES":
        return array.astype(np.object_)
    return array.astype(numpy_dtype("FP32" if spec.datatype == "BF16" else spec.datatype), copy=False)


def file_samples(
    path: Path, specs: Sequence[TensorSpec], batched: bool, batch_size: int, shapes: Mapping[str, tuple[int, ...]]
) -> list[Sample]:
    """Samples from a .npy (single input), .npz (one array per input) or .json file.

    Arrays hold a stack of items along their first axis (one item = one batch-1 request's
    tensor without the batch dimension); ``batch_size`` consecutive items make one request.
    """
    if not path.is_file():
        raise ValueError(f"{path}: no such file or folder")
    by_name = {s.name: s for s in specs}
    suffix = path.suffix.lower()
    if suffix == ".npy":
        if len(specs) != 1:
            raise ValueError(
                f"{path}: a .npy file feeds a single-input model; this one has "
                f"{[s.name for s in specs]} (use .npz or .json)"
            )
        items = {specs[0].name: np.load(path, allow_pickle=False)}
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            items = {name: archive[name] for name in archive.files}
    elif suffix == ".json":
        items = _json_items(path, specs, shapes)
    else:
        raise ValueError(f"{path}: input data must be .npy, .npz, .json or a folder of images")
    missing = sorted(set(by_name) - set(items))
    unknown = sorted(set(items) - set(by_name))
    if missing or unknown:
        raise ValueError(f"{path}: inputs missing {missing}, not model inputs {unknown}")
    items = {name: _coerce(np.asarray(array), by_name[name]) for name, array in items.items()}
    return _batches(items, batched, batch_size)


def _json_value(spec: TensorSpec, value: Any, shapes: Mapping[str, tuple[int, ...]]) -> np.ndarray:
    """One item of perf_analyzer's JSON format: a flat list, {"content", "shape"} or {"b64"}."""
    shape: Sequence[int] | None = None
    if isinstance(value, dict):
        shape = value.get("shape")
        if "b64" in value:
            raw = base64.b64decode(value["b64"])
            if spec.datatype == "BYTES":
                return np.array([raw], dtype=np.object_)
            return np.frombuffer(raw, dtype=numpy_dtype(spec.datatype)).reshape(shape or _dims(spec, shapes))
        value = value.get("content")
    if spec.datatype == "BYTES":
        flat = np.array([v.encode() if isinstance(v, str) else v for v in np.ravel(value)], dtype=np.object_)
    else:
        flat = np.asarray(value).ravel()
    return flat.reshape(shape or _dims(spec, shapes))


def _json_items(path: Path, specs: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...]]) -> Sample:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read JSON input data: {exc}") from None
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f'{path}: expected {{"data": [{{"INPUT": [...], ...}}, ...]}} (perf_analyzer\'s format)')
    by_name = {s.name: s for s in specs}
    items: dict[str, list[np.ndarray]] = {}
    for number, entry in enumerate(entries):
        for name, value in entry.items():
            if name not in by_name:
                raise ValueError(f"{path}: data[{number}] names '{name}', not an input of the model")
            items.setdefault(name, []).append(_json_value(by_name[name], value, shapes))
    return {name: np.stack(values) for name, values in items.items()}


def image_samples(
    folder: Path, specs: Sequence[TensorSpec], batched: bool, batch_size: int, input_name: str | None = None
) -> list[Sample]:
    """Encoded images from a folder, sent as a BYTES tensor of shape [batch, 1] to the image input."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ValueError(f"{folder}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    if input_name is None:
        if len(specs) != 1:
            raise ValueError(
                f"the model has several inputs {[s.name for s in specs]}; name the image input with --image-input"
            )
        input_name = specs[0].name
    elif input_name not in {s.name for s in specs}:
        raise ValueError(f"--image-input '{input_name}' is not an input of the model")
    encoded = np.array([p.read_bytes() for p in files], dtype=np.object_).reshape(-1, 1)
    return _batches({input_name: encoded}, batched, batch_size)


def datatype_overrides(samples: Sequence[Sample], specs: Sequence[TensorSpec]) -> dict[str, str]:
    """Datatypes to send: the model's own, except BYTES when images go to a tensor input."""
    declared = {s.name: s.datatype for s in specs}
    first = samples[0]
    return {name: "BYTES" if array.dtype == np.object_ else declared[name] for name, array in first.items()}
