"""The official tritonclient (HTTP and gRPC) against a real Ferry server on loopback."""

from __future__ import annotations

import numpy as np
import pytest

from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FIXED_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]
NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


@pytest.fixture(params=["http", "grpc"])
def triton(request, server) -> Triton:
    return connect(request.param, server)


def simple_inputs(batch: int = 1) -> dict[str, np.ndarray]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    return {"INPUT0": a, "INPUT1": np.full((batch, 16), 3, dtype=np.int32)}


def all_type_inputs(batch: int = 2, length: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = {}
    for datatype in FIXED_TYPES:
        dtype = NUMPY[datatype]
        if datatype == "BOOL":
            values = rng.integers(0, 2, (batch, length)).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, (batch, length), dtype=dtype, endpoint=True)
        else:
            values = (rng.standard_normal((batch, length)) * 100).astype(dtype)
        arrays[f"in_{datatype}"] = values
    words = np.array([f"word-{i}-ünï".encode() for i in range(batch * length)], dtype=object)
    arrays["in_BYTES"] = words.reshape(batch, length)
    return arrays


# --- health, metadata, config ---------------------------------------------------------------


def test_health(triton: Triton) -> None:
    assert triton.client.is_server_live()
    assert triton.client.is_server_ready()
    assert triton.client.is_model_ready("simple")
    assert triton.client.is_model_ready("simple", "1")
    assert not triton.client.is_model_ready("no_such_model")
    assert not triton.client.is_model_ready("simple", "7")


def test_server_metadata(triton: Triton) -> None:
    meta = triton.client.get_server_metadata()
    if triton.protocol == "grpc":
        meta = {"name": meta.name, "extensions": list(meta.extensions)}
    assert meta["name"] == "ferry"
    for extension in ("binary_tensor_data", "model_repository", "statistics", "model_configuration"):
        assert extension in meta["extensions"]


def test_model_metadata_and_config(triton: Triton) -> None:
    meta = (
        triton.client.get_model_metadata("simple", as_json=True)
        if triton.protocol == "grpc"
        else triton.client.get_model_metadata("simple")
    )
    assert meta["name"] == "simple"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["inputs"]] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    config = (
        triton.client.get_model_config("simple", as_json=True)
        if triton.protocol == "grpc"
        else triton.client.get_model_config("simple")
    )
    config = config.get("config", config)
    assert int(config["max_batch_size"]) == 8
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["data_type"] == "TYPE_INT32"


def test_autocompleted_config_is_reported(triton: Triton) -> None:
    config = (
        triton.client.get_model_config("fixed_nobatch", as_json=True)
        if triton.protocol == "grpc"
        else triton.client.get_model_config("fixed_nobatch")
    )
    config = config.get("config", config)
    assert int(config.get("max_batch_size", 0)) == 0
    assert {o["name"] for o in config["output"]} >= {"y"}


# --- inference ------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_infer_simple(triton: Triton, binary: bool) -> None:
    arrays = simple_inputs(batch=3)
    result = triton.infer("simple", arrays, ["OUTPUT0", "OUTPUT1"], binary=binary, request_id="req-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])
    response = result.get_response() if triton.protocol == "http" else result.get_response(as_json=True)
    assert response["id"] == "req-42"
    assert response["model_version"] == "1"


def test_infer_returns_all_outputs_when_none_requested(triton: Triton) -> None:
    arrays = simple_inputs()
    result = triton.infer("simple", arrays)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])


def test_requested_output_subset(triton: Triton) -> None:
    arrays = simple_inputs()
    result = triton.infer("simple", arrays, ["OUTPUT1"])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), arrays["INPUT0"] - arrays["INPUT1"])


@pytest.mark.parametrize("binary", [True, False])
def test_every_datatype_round_trips(triton: Triton, binary: bool) -> None:
    arrays = all_type_inputs()
    result = triton.infer("identity_all", arrays, binary=binary)
    for name, array in arrays.items():
        out = result.as_numpy(name.replace("in_", "out_"))
        assert out.shape == array.shape, name
        if name == "in_BYTES":
            assert [bytes(x) for x in out.reshape(-1)] == list(array.reshape(-1))
        else:
            assert out.dtype == array.dtype, name
            np.testing.assert_array_equal(out, array, err_msg=name)


def test_bf16_round_trips(triton: Triton) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")  # tritonclient's own BF16 type
    values = np.array([[1.0, -2.5, 0.15625, 3.0e38, -0.0]], dtype=ml_dtypes.bfloat16)
    result = triton.infer("identity_bf16", {"in_BF16": values}, ["out_BF16"], datatypes={"in_BF16": "BF16"})
    out = result.as_numpy("out_BF16")
    np.testing.assert_array_equal(np.asarray(out, dtype=np.float32), values.astype(np.float32))


def test_variable_dims_and_unbatched_models(triton: Triton) -> None:
    x = np.linspace(-1, 1, 14, dtype=np.float32).reshape(2, 7)
    result = triton.infer("dynamic_shape", {"x": x}, ["y"])
    np.testing.assert_allclose(result.as_numpy("y"), x * 2 + 1, rtol=1e-6)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = triton.infer("fixed_nobatch", {"x": x})
    np.testing.assert_allclose(result.as_numpy("y"), x * x)


def test_statistics(triton: Triton) -> None:
    triton.infer("simple_fp32", {"INPUT0": np.ones((2, 16), np.float32), "INPUT1": np.ones((2, 16), np.float32)})
    stats = (
        triton.client.get_inference_statistics("simple_fp32", as_json=True)
        if triton.protocol == "grpc"
        else triton.client.get_inference_statistics("simple_fp32")
    )
    entry = stats["model_stats"][0]
    assert entry["name"] == "simple_fp32"
    assert int(entry["inference_stats"]["success"]["count"]) >= 1
    assert int(entry["inference_count"]) >= 2


def test_stream_infer_over_grpc(server) -> None:
    import queue

    triton = connect("grpc", server)
    results: queue.Queue = queue.Queue()
    triton.client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        arrays = simple_inputs()
        for i in range(3):
            triton.client.async_stream_infer("simple", triton.inputs(arrays), request_id=str(i))
        triton.client.async_stream_infer("no_such_model", triton.inputs(arrays), request_id="bad")
        answers = [results.get(timeout=30) for _ in range(4)]
    finally:
        triton.client.stop_stream()
    good = [r for r, e in answers if e is None]
    bad = [e for r, e in answers if e is not None]
    assert len(good) == 3 and len(bad) == 1
    assert "Request for unknown model: 'no_such_model' is not found" in str(bad[0])
    for result in good:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] + arrays["INPUT1"])


# --- repository -----------------------------------------------------------------------------


def test_repository_index_load_unload(triton: Triton) -> None:
    index = (
        triton.client.get_model_repository_index(as_json=True)
        if triton.protocol == "grpc"
        else triton.client.get_model_repository_index()
    )
    rows = index.get("models", index) if isinstance(index, dict) else index
    states = {row["name"]: row.get("state") for row in rows}
    assert states["simple"] == "READY"
    triton.client.unload_model("simple_fp32")
    assert not triton.client.is_model_ready("simple_fp32")
    arrays = {"INPUT0": np.ones((1, 16), np.float32), "INPUT1": np.ones((1, 16), np.float32)}
    triton.expect_error(
        "unavailable",
        "Request for unknown model: 'simple_fp32' has no available versions",
        triton.infer,
        "simple_fp32",
        arrays,
    )
    triton.client.load_model("simple_fp32")
    assert triton.client.is_model_ready("simple_fp32")
    result = triton.infer("simple_fp32", arrays, ["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays["INPUT0"] * 2)


def test_load_with_config_override(triton: Triton) -> None:
    override = '{"name": "simple_fp32", "platform": "onnxruntime_onnx", "max_batch_size": 2}'
    triton.client.load_model("simple_fp32", config=override)
    try:
        config = (
            triton.client.get_model_config("simple_fp32", as_json=True)
            if triton.protocol == "grpc"
            else triton.client.get_model_config("simple_fp32")
        )
        assert int(config.get("config", config)["max_batch_size"]) == 2
        big = {"INPUT0": np.ones((3, 16), np.float32), "INPUT1": np.ones((3, 16), np.float32)}
        triton.expect_error("invalid", "max_batch_size", triton.infer, "simple_fp32", big)
    finally:
        triton.client.load_model("simple_fp32")
    assert triton.client.is_model_ready("simple_fp32")


def test_load_unknown_model_fails_clearly(triton: Triton) -> None:
    triton.expect_error("not_found", "failed to load 'no_such_model'", triton.client.load_model, "no_such_model")
    triton.expect_error("invalid", "invalid model name", triton.client.load_model, "..")


def test_classification_extension(triton: Triton) -> None:
    import onnxruntime as ort

    from ..conftest import MODEL_REPO

    x = np.random.default_rng(3).random((2, 1, 28, 28), dtype=np.float32)
    if triton.protocol == "http":
        outputs = [triton.module.InferRequestedOutput("logits", binary_data=False, class_count=3)]
    else:
        outputs = [triton.module.InferRequestedOutput("logits", class_count=3)]
    result = triton.client.infer("digits", triton.inputs({"input": x}), outputs=outputs)
    strings = result.as_numpy("logits")
    assert strings.shape == (2, 3)
    logits = ort.InferenceSession(str(MODEL_REPO / "digits" / "1" / "model.onnx")).run(None, {"input": x})[0]
    for row, expected in zip(strings, logits, strict=True):
        top = np.argsort(-expected)[:3]
        parsed = [item.decode().split(":") if isinstance(item, bytes) else item.split(":") for item in row]
        assert [int(p[1]) for p in parsed] == list(top)
        assert [p[2] for p in parsed] == [str(i) for i in top]  # labels.txt holds the digit names
        np.testing.assert_allclose([float(p[0]) for p in parsed], expected[top], rtol=1e-5, atol=1e-5)
