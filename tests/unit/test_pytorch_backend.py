"""PyTorch backend on real TorchScript modules: results against ONNX Runtime, precision modes,
argument and result binding, load errors; GPU paths (CUDA graphs, pinned staging) where CUDA exists."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format

from ferry.backends.base import InstanceSpec
from ferry.errors import FerryError, ModelLoadError
from ferry.repository.config import read_config_file
from ferry.repository.model import load_version
from ferry_client.protocol import model_config_pb2 as mc

from ..conftest import Payload

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
from ferry.backends.pytorch import PyTorchBackend, PyTorchInstance  # noqa: E402

# TorchScript is what Triton's PyTorch backend serves; torch 2.13 marks its API deprecated.
pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"),
]
REPO = Path(__file__).resolve().parents[2] / "model_repo"
EXTRAS = REPO.parent / "model_repo_extras"  # digits_torch needs torch, so it is not in the default repository
CUDA = torch.cuda.is_available()
#: FP32 on a GPU: torch runs cuDNN convolutions in TF32 by default.
GPU_FP32_TOLERANCE = 2e-2
needs_cuda = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs CUDA (torch.cuda.is_available() is False)")]


def digits_inputs(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((count, 1, 28, 28), dtype=np.float32)


def onnx_logits(x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(REPO / "digits" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input": x})[0]


def digits_torch(tmp_path: Path, extra: str = "", kind: str = "KIND_AUTO") -> tuple[Path, mc.ModelConfig]:
    model_dir = tmp_path / "digits_torch"
    shutil.copytree(EXTRAS / "digits_torch", model_dir)
    (model_dir / "config.pbtxt").write_text((model_dir / "config.pbtxt").read_text().replace("KIND_AUTO", kind))
    config = read_config_file(model_dir)
    assert config is not None
    # Merged, not appended: the bundled config has an `optimization` block already, and a second one
    # is a parse error (this broke every GPU test that sets an optimization option).
    text_format.Merge(extra, config)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir, config


def instance(tmp_path: Path, extra: str = "", kind: str = "CPU", device_id: int = 0) -> PyTorchInstance:
    model_dir, config = digits_torch(tmp_path, extra)
    return PyTorchInstance(model_dir / "1" / "model.pt", config, InstanceSpec("i", kind, device_id))


def precision(value: str) -> str:
    return f'parameters {{ key: "ferry_precision" value: {{ string_value: "{value}" }} }}\n'


# --- CPU --------------------------------------------------------------------------------------


def test_bundled_model_loads_on_the_cpu_and_matches_onnxruntime(tmp_path: Path) -> None:
    model_dir, config = digits_torch(tmp_path)
    version = load_version(model_dir, 1, config, "digits_torch")
    try:
        assert version.config.backend == "pytorch" and version.config.platform == "pytorch_libtorch"
        (only,) = version.instances
        assert only.device == ("cuda:0" if CUDA else "cpu")
        for batch in (1, 7, 64):
            x = digits_inputs(batch, seed=batch)
            got = only.compute({"input": x}, ["logits"])["logits"]
            assert got.dtype == np.float32 and got.shape == (batch, 10)
            np.testing.assert_allclose(got, onnx_logits(x), atol=GPU_FP32_TOLERANCE if CUDA else 1e-4)
        assert version.pipeline is not None  # ferry_image is served as for the ONNX digits model
    finally:
        version.close()


def test_read_only_request_memory_is_not_aliased(tmp_path: Path) -> None:
    model = instance(tmp_path)
    x = digits_inputs(3)
    frozen = x.copy()
    frozen.setflags(write=False)
    np.testing.assert_allclose(model.compute({"input": frozen}, ["logits"])["logits"], onnx_logits(x), atol=1e-4)
    assert model.input_buffer("input", (3, 1, 28, 28), np.dtype(np.float32)) is None  # CPU: no staging
    assert not model.overlaps_batches  # nothing on the CPU to overlap: the scheduler calls compute


@pytest.mark.parametrize("mode", ["fp16", "autocast_fp16"])
def test_fp16_modes_on_the_cpu(tmp_path: Path, mode: str) -> None:
    """Half weights or autocast: FP32 results (the declared type), close to FP32 and the same classes."""
    model = instance(tmp_path, precision(mode))
    spec = importlib.util.spec_from_file_location("digits_build", REPO / "digits" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    x = build.load_test_set(REPO / "digits" / "test_split.npz")[0][:128]  # held-out digits (CPU FP16 is slow)
    got = np.concatenate([model.compute({"input": x[i : i + 64]}, ["logits"])["logits"] for i in range(0, len(x), 64)])
    expected = onnx_logits(x)
    assert got.dtype == np.float32
    # float16 keeps ~3 significant digits; logits here reach |26| (measured: max difference 0.013).
    assert np.abs(got - expected).max() < 0.05
    assert (got.argmax(1) == expected.argmax(1)).mean() == 1.0
    if mode == "fp16":
        assert next(model._module.parameters()).dtype == torch.float16


class TwoInTwoOut(torch.nn.Module):
    """Asymmetric in its inputs, so a wrong binding shows."""

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return first - second, (first * 10 + second).to(torch.int32)


class DictOut(torch.nn.Module):
    def forward(self, first: torch.Tensor, second: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"difference": first - second, "sum": first + second}


def scripted(tmp_path: Path, module: torch.nn.Module, config_text: str) -> tuple[Path, mc.ModelConfig]:
    (tmp_path / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(module), str(tmp_path / "1" / "model.pt"))
    return tmp_path / "1" / "model.pt", text_format.Parse(config_text, mc.ModelConfig(name="m"))


def io_config(inputs: list[str], outputs: list[tuple[str, str]]) -> str:
    tensors = "".join(f'input {{ name: "{n}" data_type: TYPE_FP32 dims: [2] }}\n' for n in inputs)
    tensors += "".join(f'output {{ name: "{n}" data_type: {t} dims: [2] }}\n' for n, t in outputs)
    return "max_batch_size: 4\n" + tensors


@pytest.mark.parametrize(
    ("inputs", "outputs"),
    [
        (["second", "first"], [("diff", "TYPE_FP32"), ("code", "TYPE_INT32")]),  # by forward's parameter names
        (["INPUT__1", "INPUT__0"], [("OUTPUT__1", "TYPE_INT32"), ("OUTPUT__0", "TYPE_FP32")]),  # Triton's __index
    ],
)
def test_inputs_and_tuple_outputs_bind_by_name_or_index(
    tmp_path: Path, inputs: list[str], outputs: list[tuple[str, str]]
) -> None:
    model_file, config = scripted(tmp_path, TwoInTwoOut(), io_config(inputs, outputs))
    model = PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))
    first, second = np.array([[5.0, 7.0]], np.float32), np.array([[1.0, 2.0]], np.float32)
    names = {"second": second, "first": first, "INPUT__0": first, "INPUT__1": second}
    difference, code = (
        (outputs[0][0], outputs[1][0]) if outputs[0][1] == "TYPE_FP32" else (outputs[1][0], outputs[0][0])
    )
    result = model.compute({name: names[name] for name in inputs}, [difference, code])
    np.testing.assert_array_equal(result[difference], first - second)
    np.testing.assert_array_equal(result[code], np.array([[51, 72]], np.int32))
    assert result[code].dtype == np.int32


def test_dict_outputs_bind_by_key(tmp_path: Path) -> None:
    model_file, config = scripted(
        tmp_path, DictOut(), io_config(["first", "second"], [("sum", "TYPE_FP32"), ("difference", "TYPE_FP32")])
    )
    model = PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))
    a, b = np.ones((2, 2), np.float32), np.full((2, 2), 3.0, np.float32)
    result = model.compute({"first": a, "second": b}, ["sum", "difference"])
    np.testing.assert_array_equal(result["sum"], a + b)
    np.testing.assert_array_equal(result["difference"], a - b)


def test_output_type_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    model_file, config = scripted(
        tmp_path, TwoInTwoOut(), io_config(["first", "second"], [("diff", "TYPE_FP32"), ("code", "TYPE_INT64")])
    )
    model = PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))
    with pytest.raises(FerryError, match="output 'code' is torch.int32 but the config declares torch.int64"):
        model.compute({"first": np.ones((1, 2), np.float32), "second": np.ones((1, 2), np.float32)}, ["code"])


# --- load errors ------------------------------------------------------------------------------


def test_torchscript_needs_declared_tensors(tmp_path: Path) -> None:
    model_file, config = scripted(tmp_path, DictOut(), "max_batch_size: 4")
    with pytest.raises(ModelLoadError, match="must declare every input and output in config.pbtxt"):
        PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))


def test_too_many_declared_inputs(tmp_path: Path) -> None:
    model_file, config = scripted(tmp_path, DictOut(), io_config(["a", "b", "c"], [("sum", "TYPE_FP32")]))
    with pytest.raises(
        ModelLoadError,
        match=r"forward takes 2 tensor\(s\) \(first, second\) but the config "
        r"declares 3 inputs",
    ):
        PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))


def test_bytes_tensors_are_refused(tmp_path: Path) -> None:
    model_file, config = scripted(tmp_path, DictOut(), io_config(["first", "second"], [("sum", "TYPE_FP32")]))
    config.input[0].data_type = mc.TYPE_STRING
    with pytest.raises(ModelLoadError, match="tensor 'first': datatype BYTES has no torch tensor type"):
        PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))


def test_pickled_modules_are_never_unpickled(tmp_path: Path) -> None:
    """A torch.save (pickle) archive in place of TorchScript is refused by torch.jit.load, not executed."""
    model_file, config = scripted(tmp_path, DictOut(), io_config(["first", "second"], [("sum", "TYPE_FP32")]))
    marker = tmp_path / "unpickled"
    torch.save(Payload(marker), str(model_file))
    with pytest.raises(ModelLoadError, match="torch.jit.load cannot load .* as TorchScript"):
        PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))
    assert not marker.exists()


def test_corrupt_file(tmp_path: Path) -> None:
    model_file, config = scripted(tmp_path, DictOut(), io_config(["first", "second"], [("sum", "TYPE_FP32")]))
    model_file.write_bytes(b"not a zip archive")
    with pytest.raises(ModelLoadError, match="as TorchScript"):
        PyTorchInstance(model_file, config, InstanceSpec("i", "CPU"))


@pytest.mark.skipif(CUDA, reason="checks the error where CUDA is absent")
def test_gpu_instance_without_cuda_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"KIND_GPU but torch .* has no usable CUDA device"):
        instance(tmp_path, kind="GPU")
    model_dir, config = digits_torch(tmp_path / "auto")
    assert not PyTorchBackend().gpu_available()
    version = load_version(model_dir, 1, config, "digits_torch")  # KIND_AUTO falls back to the CPU
    assert version.instances[0].device == "cpu"
    version.close()


# --- ONNX models converted by onnx2torch ------------------------------------------------------


def onnx_digits(tmp_path: Path, extra: str = "") -> tuple[Path, mc.ModelConfig]:
    """The ONNX digits model configured for the PyTorch backend with conversion."""
    model_dir = tmp_path / "digits_converted"
    (model_dir / "1").mkdir(parents=True)
    shutil.copy(REPO / "digits" / "1" / "model.onnx", model_dir / "1" / "model.onnx")
    text = (
        'backend: "pytorch"\nmax_batch_size: 64\n'
        'parameters { key: "ferry_convert_from" value: { string_value: "onnx" } }\n' + extra
    )
    (model_dir / "config.pbtxt").write_text(text)
    config = read_config_file(model_dir)
    assert config is not None
    return model_dir, config


def digits_network_converter(model: onnx.ModelProto) -> torch.nn.Module:
    """Stands in for onnx2torch.convert: rebuilds the digits network from the ModelProto it is given."""
    assert isinstance(model, onnx.ModelProto)
    spec = importlib.util.spec_from_file_location("digits_torch_build", EXTRAS / "digits_torch" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build.network_from_onnx(model)


def test_conversion_path_with_a_stand_in_converter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything around onnx2torch.convert: file choice, IO from the ONNX graph, config completion, serving.

    onnx2torch itself cannot be imported where the PyPI torchvision build does not match the CPU torch
    wheel; test_conversion_with_onnx2torch covers the real converter wherever it imports.
    """
    monkeypatch.setitem(sys.modules, "onnx2torch", types.SimpleNamespace(convert=digits_network_converter))
    model_dir, config = onnx_digits(tmp_path)
    version = load_version(model_dir, 1, config, "digits_converted")
    try:
        assert [t.name for t in version.config.input] == ["input"] and list(version.config.input[0].dims) == [1, 28, 28]
        assert [t.name for t in version.config.output] == ["logits"]
        x = digits_inputs(5)
        np.testing.assert_allclose(
            version.instances[0].compute({"input": x}, ["logits"])["logits"],
            onnx_logits(x),
            atol=GPU_FP32_TOLERANCE if CUDA else 1e-4,
        )
    finally:
        version.close()


def test_missing_onnx2torch_is_a_load_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx2torch", None)  # makes the import fail
    model_dir, config = onnx_digits(tmp_path)
    with pytest.raises(ModelLoadError, match="ferry_convert_from 'onnx' needs onnx2torch, which could not be imported"):
        load_version(model_dir, 1, config, "digits_converted")


def onnx2torch_import_error() -> str:
    try:
        import onnx2torch  # noqa: F401
    except Exception as exc:  # torchvision raises RuntimeError when its ops fail to load
        return f"onnx2torch cannot be imported here ({type(exc).__name__}: {str(exc)[:120]})"
    return ""


@pytest.mark.skipif(bool(onnx2torch_import_error()), reason=onnx2torch_import_error() or "-")
def test_conversion_with_onnx2torch(tmp_path: Path) -> None:
    model_dir, config = onnx_digits(tmp_path, precision("fp16"))
    version = load_version(model_dir, 1, config, "digits_converted")
    try:
        x = digits_inputs(9)
        got = version.instances[0].compute({"input": x}, ["logits"])["logits"]
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, onnx_logits(x), atol=0.05)
    finally:
        version.close()


# --- GPU --------------------------------------------------------------------------------------

GRAPHS = "optimization { cuda { graphs: true } }\n"


@pytest.mark.parametrize("mode", ["fp32", "fp16", "autocast_fp16"])
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_gpu_instance_matches_onnxruntime(tmp_path: Path, mode: str, graphs: bool, marks: None) -> None:
    extra = precision(mode) + ("" if graphs else "optimization { cuda { graphs: false } }\n")
    model = instance(tmp_path, extra, kind="GPU")
    assert model.device == "cuda:0" and (model._graphs is not None) == graphs
    if graphs:
        assert model._graphs.buckets == (1, 2, 4, 8, 16, 32, 40, 48, 56, 64)
    tolerance = GPU_FP32_TOLERANCE if mode == "fp32" else 0.05
    for batch in (1, 3, 5, 33, 64):  # 3, 5 and 33 are padded to buckets 4, 8 and 40
        x = digits_inputs(batch, seed=batch)
        np.testing.assert_allclose(model.compute({"input": x}, ["logits"])["logits"], onnx_logits(x), atol=tolerance)
    model.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_batches_assembled_in_pinned_staging_are_used_in_place(tmp_path: Path, marks: None) -> None:
    model = instance(tmp_path, kind="GPU")
    x = digits_inputs(6)
    view = model.input_buffer("input", x.shape, x.dtype)
    assert view is not None and view.shape == x.shape
    np.copyto(view, x)
    staging = model._staging[0]["input"]
    assert staging.is_pinned() and view.__array_interface__["data"][0] == staging.data_ptr()
    got = model.compute({"input": view}, ["logits"])["logits"]
    np.testing.assert_allclose(got, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    model.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_gpu_results_come_back_through_one_pinned_buffer(tmp_path: Path, marks: None) -> None:
    model = instance(tmp_path, kind="GPU")
    x = digits_inputs(5)
    first = model.compute({"input": x}, ["logits"])["logits"]
    buffer = model._host_outputs[0].buffer("logits")
    assert buffer is not None and buffer.is_pinned()
    second = model.compute({"input": x[:3]}, ["logits"])["logits"]
    assert model._host_outputs[0].buffer("logits") is buffer
    np.testing.assert_allclose(first, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    np.testing.assert_allclose(second, onnx_logits(x[:3]), atol=GPU_FP32_TOLERANCE)
    model.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_pinned_memory_can_be_disabled(tmp_path: Path, marks: None) -> None:
    extra = "optimization { input_pinned_memory { enable: false } output_pinned_memory { enable: false } }\n"
    model = instance(tmp_path, extra, kind="GPU")
    assert model.input_buffer("input", (2, 1, 28, 28), np.dtype(np.float32)) is None
    x = digits_inputs(2)
    got = model.compute({"input": x}, ["logits"])["logits"]
    np.testing.assert_allclose(got, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    model.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_instances_per_gpu_each_have_a_stream(tmp_path: Path, marks: None) -> None:
    model_dir, config = digits_torch(tmp_path, kind="KIND_GPU")
    config.instance_group[0].count = 2
    config.instance_group[0].gpus.extend(range(torch.cuda.device_count()))
    version = load_version(model_dir, 1, config, "digits_torch")
    try:
        assert len(version.instances) == 2 * torch.cuda.device_count()
        assert len({id(i._stream) for i in version.instances}) == len(version.instances)
        x = digits_inputs(4)
        for model in version.instances:
            np.testing.assert_allclose(
                model.compute({"input": x}, ["logits"])["logits"], onnx_logits(x), atol=GPU_FP32_TOLERANCE
            )
    finally:
        version.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_capture_tolerates_another_thread_loading_onto_the_gpu(
    tmp_path: Path, marks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server loads other models while an instance captures its graphs. Each capture here is made
    to wait for another thread that loads TorchScript onto the GPU and runs it, so the overlap that
    failed on the H100 (with the global capture mode) happens on every capture, not by chance."""
    import contextlib
    import threading

    real_graph = torch.cuda.graph
    neighbour_errors: list[BaseException] = []
    captures: list[int] = []

    def neighbour() -> None:
        try:
            module = torch.jit.load(str(EXTRAS / "digits_torch" / "1" / "model.pt"), map_location="cuda:0")
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream), torch.inference_mode():
                module(torch.from_numpy(digits_inputs(2)).to("cuda:0", non_blocking=True))
            stream.synchronize()
        except BaseException as exc:  # reported by the assertion below
            neighbour_errors.append(exc)

    @contextlib.contextmanager
    def graph_with_a_neighbour(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_graph(*args, **kwargs) as graph:
            thread = threading.Thread(target=neighbour)
            thread.start()
            thread.join()
            captures.append(1)
            yield graph

    monkeypatch.setattr(torch.cuda, "graph", graph_with_a_neighbour)
    model = instance(tmp_path, kind="GPU")
    assert neighbour_errors == []
    assert model._graphs is not None and len(captures) == len(model._graphs.buckets)
    x = digits_inputs(5)
    got = model.compute({"input": x}, ["logits"])["logits"]
    np.testing.assert_allclose(got, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    model.close()


def test_graph_buffer_sets_are_used_in_turn() -> None:
    """Two successive batches never share a set of static inputs and outputs: the next batch's copy
    may then run while the current one computes, and the current outputs outlive the next replay."""
    from ferry.backends.cuda_graphs import Alternation

    turns = Alternation(2)
    assert [turns.take() for _ in range(5)] == [0, 1, 0, 1, 0]
    assert [Alternation(1).take() for _ in range(2)] == [0, 0]
    with pytest.raises(ValueError, match="at least one buffer set"):
        Alternation(0)


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_graph_outputs_of_one_batch_survive_the_next_replay(tmp_path: Path, marks: None) -> None:
    """With CUDA graphs, batch n's device outputs are in the other set than batch n+1's: replaying the
    next batch leaves them as they were (double buffering)."""
    model = instance(tmp_path, GRAPHS, kind="GPU")
    graphs = model._graphs
    assert graphs is not None and len(graphs.sets) == 2
    x, y = digits_inputs(3, seed=1), digits_inputs(3, seed=2)
    with torch.inference_mode(), torch.cuda.stream(model._stream):
        first = graphs.compute([torch.from_numpy(x).pin_memory()], 3)["logits"]
        first_values = first.cpu().numpy().copy()
        second = graphs.compute([torch.from_numpy(y).pin_memory()], 3)["logits"]
        torch.cuda.synchronize()
        assert first.data_ptr() != second.data_ptr()
        np.testing.assert_array_equal(first.cpu().numpy(), first_values)
    np.testing.assert_allclose(first_values, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    np.testing.assert_allclose(second.cpu().numpy(), onnx_logits(y), atol=GPU_FP32_TOLERANCE)
    model.close()


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
def test_two_batches_in_flight_answer_as_one_at_a_time(tmp_path: Path, graphs: bool, marks: None) -> None:
    """Each batch is assembled in its set's pinned buffer and launched before the one in flight is
    finished, as the scheduler does: the answers are those of one batch at a time."""
    model = instance(tmp_path, GRAPHS if graphs else "optimization { cuda { graphs: false } }\n", kind="GPU")
    assert model.overlaps_batches and (model._graphs is not None) == graphs
    batches = [digits_inputs(size, seed=size) for size in (5, 3, 8, 2, 33)]
    alone = [model.compute({"input": x}, ["logits"])["logits"] for x in batches]
    flight: list[Any] = []
    answers = []
    for index, x in enumerate(batches):
        slot = index % 2
        view = model.input_buffer("input", x.shape, x.dtype, slot)
        assert view is not None
        np.copyto(view, x)
        flight.append(model.launch({"input": view}, ["logits"], slot))
        if len(flight) == 2:  # the batch before is still in flight while this one was launched
            answers.append(model.finish(flight.pop(0))["logits"])
    answers.append(model.finish(flight.pop(0))["logits"])
    assert model._staging[0]["input"].data_ptr() != model._staging[1]["input"].data_ptr()
    for got, expected, x in zip(answers, alone, batches, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-4)  # the same batch sizes and kernels
        np.testing.assert_allclose(got, onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    model.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=needs_cuda, id="cuda")])
async def test_the_scheduler_keeps_two_batches_in_flight_on_a_gpu_instance(tmp_path: Path, marks: None) -> None:
    """The real instance behind the batcher: the first batch's finish is held until the second batch
    is launched, and every answer equals the one-at-a-time path."""
    import asyncio
    import threading

    from ferry.scheduling import Scheduler, SchedulingPolicy
    from ferry.scheduling.interface import Execution
    from ferry.statistics import ModelStats

    model = instance(tmp_path, kind="GPU")
    launched = threading.Event()
    launches: list[int] = []
    real_launch, real_finish = model.launch, model.finish

    def launch(
        inputs: dict[str, np.ndarray], outputs: list[str], slot: int = 0, kept: frozenset[str] = frozenset()
    ) -> Any:
        launches.append(slot)
        if len(launches) == 2:
            launched.set()
        return real_launch(inputs, outputs, slot, kept)

    def finish(handle: Any) -> dict[str, np.ndarray]:
        launched.wait(30)  # the first finish waits for the second launch (a hang guard only)
        return real_finish(handle)

    model.launch, model.finish = launch, finish
    policy = SchedulingPolicy(max_batch_size=8, dynamic=True)
    scheduler = Scheduler("digits", [model], ModelStats("digits", "1"), policy)
    scheduler.start()
    # queued together: batches [1, 4, 3], [6, 2] and [7], each gathered in its set's pinned buffer
    requests = [digits_inputs(size, seed=10 + size) for size in (1, 4, 3, 6, 2, 7)]
    answers = await asyncio.wait_for(
        asyncio.gather(*(scheduler.submit(Execution({"input": x}, ["logits"], len(x))) for x in requests)), 60
    )
    await scheduler.stop()
    assert launched.is_set() and launches[:2] == [0, 1]
    for answer, x in zip(answers, requests, strict=True):
        alone = model.compute({"input": x}, ["logits"])["logits"]  # other batch sizes: TF32's rounding
        np.testing.assert_allclose(answer["logits"], alone, atol=GPU_FP32_TOLERANCE)
        np.testing.assert_allclose(answer["logits"], onnx_logits(x), atol=GPU_FP32_TOLERANCE)
    model.close()
