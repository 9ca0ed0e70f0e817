"""Every way an ensemble config can be wrong fails its load with a message naming step and tensor.

The manager runs in-process on a temporary repository with real ONNX Runtime composing models;
each case loads one bad ensemble and checks the exact reason in the repository index.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferry.errors import ModelLoadError
from ferry.repository.manager import ControlMode, ModelManager

from ..ensembles.repo import add_ensemble, add_simple, scheduling, step, tensors

AB = {"INPUT0": "A", "INPUT1": "B"}
SUMS = {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}
IO = "max_batch_size: 8\n" + tensors("input", "A", "B") + tensors("output", "SUM", "DIFF")

CASES: dict[str, tuple[str, str]] = {
    "no_step": (IO + "ensemble_scheduling { }\n", "ensemble_scheduling has no step"),
    "no_model_name": (
        IO + 'ensemble_scheduling { step [ { input_map { key: "INPUT0" value: "A" } } ] }\n',
        "step 0: 'model_name' is required",
    ),
    "namespace": (
        IO + 'ensemble_scheduling { step [ { model_name: "simple" model_namespace: "x" } ] }\n',
        "step 0 (model 'simple'): 'model_namespace' is not supported",
    ),
    "bad_version": (
        IO + scheduling(step("simple", AB, SUMS, version=-2)),
        "step 0 (model 'simple'): model_version must be -1 (latest) or a version number, got -2",
    ),
    "itself": (IO + scheduling(step("bad", AB, SUMS)), "step 0 (model 'bad'): an ensemble cannot be a step of itself"),
    "empty_input_map": (IO + scheduling(step("simple", {}, SUMS)), "step 0 (model 'simple'): 'input_map' is empty"),
    "empty_output_map": (IO + scheduling(step("simple", AB, {})), "step 0 (model 'simple'): 'output_map' is empty"),
    "written_twice": (
        IO + scheduling(step("simple", AB, SUMS), step("simple", AB, {"OUTPUT0": "SUM"})),
        "ensemble tensor 'SUM' is written by step 0 (model 'simple') and by step 1 (model 'simple')",
    ),
    "writes_input": (
        IO + scheduling(step("simple", AB, {"OUTPUT0": "A", "OUTPUT1": "DIFF"})),
        "ensemble tensor 'A' is written by the request (ensemble input) and by step 0 (model 'simple')",
    ),
    "one_output_two_tensors_same": (
        IO + scheduling(step("simple", AB, {"OUTPUT0": "SUM", "OUTPUT1": "SUM"})),
        "step 0 (model 'simple'): outputs 'OUTPUT0' and 'OUTPUT1' both write ensemble tensor 'SUM'",
    ),
    "reads_nothing": (
        IO + scheduling(step("simple", {"INPUT0": "A", "INPUT1": "NOPE"}, SUMS)),
        "step 0 (model 'simple'): input 'INPUT1' reads ensemble tensor 'NOPE', which is neither an ensemble "
        "input nor written by any step",
    ),
    "cycle": (
        IO
        + scheduling(
            step("simple", {"INPUT0": "A", "INPUT1": "LOOP"}, {"OUTPUT0": "SUM", "OUTPUT1": "BACK"}),
            step("simple", {"INPUT0": "BACK", "INPUT1": "B"}, {"OUTPUT0": "LOOP", "OUTPUT1": "DIFF"}),
        ),
        "circular dependency: step 0 (model 'simple'), step 1 (model 'simple') each wait for another's output",
    ),
    "unused_input": (
        "max_batch_size: 8\n"
        + tensors("input", "A", "B", "C")
        + tensors("output", "SUM", "DIFF")
        + scheduling(step("simple", AB, SUMS)),
        "ensemble input 'C' is not read by any step",
    ),
    "unwritten_output": (
        "max_batch_size: 8\n"
        + tensors("input", "A", "B")
        + tensors("output", "SUM", "DIFF", "EXTRA")
        + scheduling(step("simple", AB, SUMS)),
        "ensemble output 'EXTRA' is not written by any step",
    ),
    "unknown_model": (
        IO + scheduling(step("nope", AB, SUMS)),
        "step 0 (model 'nope'): model 'nope' is not in the repository",
    ),
    "missing_version": (
        IO + scheduling(step("simple", AB, SUMS, version=3)),
        "step 0 (model 'simple'): Request for unknown model: 'simple' version 3 is not found",
    ),
    "not_an_input": (
        IO + scheduling(step("simple", {**AB, "X": "A"}, SUMS)),
        "step 0 (model 'simple'): input_map key 'X' is not an input of the model (inputs: INPUT0, INPUT1)",
    ),
    "unmapped_input": (
        "max_batch_size: 8\n"
        + tensors("input", "A")
        + tensors("output", "SUM", "DIFF")
        + scheduling(step("simple", {"INPUT0": "A"}, SUMS)),
        "step 0 (model 'simple'): model input 'INPUT1' is not mapped by input_map",
    ),
    "not_an_output": (
        IO + scheduling(step("simple", AB, {**SUMS, "OUTPUT9": "X"})),
        "step 0 (model 'simple'): output_map key 'OUTPUT9' is not an output of the model (outputs: OUTPUT0, OUTPUT1)",
    ),
    "datatype": (
        "max_batch_size: 8\n"
        + tensors("input", "A", datatype="TYPE_FP32")
        + tensors("input", "B")
        + tensors("output", "SUM", "DIFF")
        + scheduling(step("simple", AB, SUMS)),
        "ensemble tensor 'A' is FP32 for ensemble 'bad' input but INT32 for step 0 (model 'simple') input 'INPUT0'",
    ),
    "shape": (
        "max_batch_size: 8\n"
        + tensors("input", "A", "B")
        + tensors("output", "SUM", dims="4")
        + tensors("output", "DIFF")
        + scheduling(step("simple", AB, SUMS)),
        "ensemble tensor 'SUM' has shape [-1, 16] for step 0 (model 'simple') output 'OUTPUT0' but [-1, 4] for "
        "ensemble 'bad' output",
    ),
    "batch_size": (
        IO.replace("max_batch_size: 8", "max_batch_size: 16") + scheduling(step("simple", AB, SUMS)),
        "ensemble 'bad' has max_batch_size 16 but step 0 (model 'simple') allows only 8",
    ),
    "instance_group": (
        IO + "instance_group [ { kind: KIND_CPU } ]\n" + scheduling(step("simple", AB, SUMS)),
        "'instance_group' is not supported on an ensemble (each step runs on its own model's instances)",
    ),
    "max_inflight": (
        IO + f"ensemble_scheduling {{ max_inflight_requests: 4 step [ {step('simple', AB, SUMS)} ] }}\n",
        "'ensemble_scheduling.max_inflight_requests' is not supported",
    ),
}


def _load_reason(repo: Path, name: str) -> str:
    async def run() -> str:
        manager = ModelManager(repo, ControlMode.EXPLICIT)
        await manager.start()
        try:
            with pytest.raises(ModelLoadError):
                await manager.load(name)
            rows = [row for row in manager.index() if row["name"] == name]
            assert [row["state"] for row in rows] == ["UNAVAILABLE"]
            return rows[0]["reason"]
        finally:
            await manager.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_ensemble_fails_to_load_with_its_message(tmp_path: Path, case: str) -> None:
    body, message = CASES[case]
    add_simple(tmp_path)
    add_ensemble(tmp_path, "bad", body)
    assert _load_reason(tmp_path, "bad") == f"bad/config.pbtxt: ensemble 'bad': {message}"


# Refused by the Triton config checks every model goes through, in Triton's words.
TRITON_CASES = {
    "no_scheduling": (IO, "ensemble scheduling must be set for ensemble bad whose platform is ensemble"),
    "decoupled": (
        IO + "model_transaction_policy { decoupled: true }\n" + scheduling(step("simple", AB, SUMS)),
        'decoupled models are supported only for python models (backend: "python"), not for bad: remove '
        "'model_transaction_policy { decoupled: true }' (an ensemble is decoupled when one of its steps is)",
    ),
}


@pytest.mark.parametrize("case", sorted(TRITON_CASES))
def test_bad_ensemble_fails_triton_checks(tmp_path: Path, case: str) -> None:
    body, message = TRITON_CASES[case]
    add_simple(tmp_path)
    add_ensemble(tmp_path, "bad", body)
    assert _load_reason(tmp_path, "bad") == message


def test_ensembles_that_contain_each_other_are_refused(tmp_path: Path) -> None:
    add_simple(tmp_path)
    add_ensemble(tmp_path, "bad", IO + scheduling(step("loop", AB, SUMS)))
    add_ensemble(tmp_path, "loop", IO + scheduling(step("bad", AB, SUMS)))
    inner = "loop/config.pbtxt: ensemble 'loop': step 0 (model 'bad'): circular dependency: bad -> loop -> bad"
    assert _load_reason(tmp_path, "bad") == (
        f"bad/config.pbtxt: ensemble 'bad': step 0 (model 'loop'): failed to load 'loop': version 1: {inner}"
    )


def test_a_decoupled_step_is_refused(tmp_path: Path) -> None:
    add_simple(tmp_path, extra_config="model_transaction_policy { decoupled: true }\n")
    add_ensemble(tmp_path, "bad", IO + scheduling(step("simple", AB, SUMS)))
    assert _load_reason(tmp_path, "bad") == (
        "bad/config.pbtxt: ensemble 'bad': step 0 (model 'simple'): failed to load 'simple': decoupled models "
        'are supported only for python models (backend: "python"), not for simple: remove '
        "'model_transaction_policy { decoupled: true }' (an ensemble is decoupled when one of its steps is)"
    )
