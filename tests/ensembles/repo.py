"""Model repositories for the ensemble tests: copies of the bundled add/sub model plus ensembles.

``simple`` computes (a + b, a - b) on INT32 [16] vectors, so an ensemble that feeds it its own
outputs computes (2a, 2b): every answer can be checked exactly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..conftest import MODEL_REPO


def add_simple(repo: Path, name: str = "simple", extra_config: str = "", max_batch_size: int = 8) -> Path:
    """A copy of the bundled ``simple`` model under ``name`` (config changed as asked)."""
    target = repo / name
    shutil.copytree(MODEL_REPO / "simple" / "1", target / "1")
    config = (MODEL_REPO / "simple" / "config.pbtxt").read_text()
    config = config.replace('name: "simple"', f'name: "{name}"').replace(
        "max_batch_size: 8", f"max_batch_size: {max_batch_size}"
    )
    (target / "config.pbtxt").write_text(config + extra_config)
    return target


def add_ensemble(repo: Path, name: str, body: str) -> Path:
    """An ensemble directory (empty version 1, as Triton wants) with ``body`` after its name."""
    target = repo / name
    (target / "1").mkdir(parents=True, exist_ok=True)
    (target / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "ensemble"\n{body}')
    return target


def tensors(kind: str, *names: str, datatype: str = "TYPE_INT32", dims: str = "16") -> str:
    """Config ``input [...]`` or ``output [...]`` for INT32 [16] tensors (or as given)."""
    entries = ", ".join(f'{{ name: "{n}" data_type: {datatype} dims: [ {dims} ] }}' for n in names)
    return f"{kind} [ {entries} ]\n"


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    """One ``step`` entry: model input -> ensemble tensor, model output -> ensemble tensor."""
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {ins} {outs} }}'


def scheduling(*steps: str) -> str:
    return f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"


def add_sub_twice(model: str = "simple", first: str = "", second: str = "") -> str:
    """Body of the two-step ensemble: (a, b) -> (a+b, a-b) -> (2a, 2b), through ``model`` twice."""
    return (
        "max_batch_size: 8\n"
        + tensors("input", "A", "B")
        + tensors("output", "TWICE_A", "TWICE_B")
        + scheduling(
            step(first or model, {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
            step(second or model, {"INPUT0": "SUM", "INPUT1": "DIFF"}, {"OUTPUT0": "TWICE_A", "OUTPUT1": "TWICE_B"}),
        )
    )
