"""What a pytorch_libtorch config asks for, read without torch: precision, conversion, CUDA graph
buckets, pinned memory, and the errors for values that mean nothing."""

from __future__ import annotations

import re
import sys

import pytest
from google.protobuf import text_format

from ferry.backends.registry import normalise_platform, platform_for_file
from ferry.backends.torch_options import TorchOptions, bucket_for, graph_buckets
from ferry.errors import ModelLoadError
from ferry_client.protocol import model_config_pb2 as mc


def config(text: str = "", max_batch_size: int = 64) -> mc.ModelConfig:
    parsed = text_format.Parse(text, mc.ModelConfig())
    parsed.max_batch_size = max_batch_size
    return parsed


def parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def test_defaults() -> None:
    options = TorchOptions.from_config(config())
    assert options == TorchOptions(
        convert_from="",
        precision="fp32",
        inference_mode=True,
        optimized_execution=True,
        cuda_graphs=False,
        graph_batch_sizes=(),
        pinned_input=True,
        pinned_output=True,
    )
    assert options.model_filename(config()) == "model.pt"


def test_parameters_and_triton_fields() -> None:
    text = (
        parameter("ferry_precision", "FP16")
        + parameter("ferry_convert_from", "onnx")
        + parameter("INFERENCE_MODE", "false")
        + parameter("DISABLE_OPTIMIZED_EXECUTION", "true")
        + "optimization { cuda { graphs: true } input_pinned_memory { enable: false } }"
    )
    options = TorchOptions.from_config(config(text, max_batch_size=24))
    assert options.precision == "fp16" and options.convert_from == "onnx" and not options.inference_mode
    assert not options.optimized_execution
    assert options.cuda_graphs and options.graph_batch_sizes == (1, 2, 4, 8, 16, 24)
    assert not options.pinned_input and options.pinned_output
    assert options.model_filename(config(text)) == "model.onnx"
    assert options.model_filename(config(text + 'default_model_filename: "other.onnx"')) == "other.onnx"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (parameter("ferry_precision", "int8"), "parameters['ferry_precision']: 'int8' is not one of fp32, fp16"),
        (parameter("ferry_convert_from", "tflite"), "parameters['ferry_convert_from']: 'tflite' is not supported"),
        (parameter("INFERENCE_MODE", "maybe"), "parameters['INFERENCE_MODE']: expected true or false, got 'maybe'"),
        (
            "optimization { cuda { graphs: true graph_spec { batch_size: 128 } } }",
            "graph_spec: batch_size 128 is outside 1..max_batch_size (64)",
        ),
    ],
)
def test_errors_name_the_setting(text: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=re.escape(message)):
        TorchOptions.from_config(config(text))


def test_graph_buckets() -> None:
    assert graph_buckets(config(max_batch_size=32)) == (1, 2, 4, 8, 16, 32)
    assert graph_buckets(config(max_batch_size=1)) == (1,)
    assert graph_buckets(config(max_batch_size=0)) == ()
    spec = "optimization { cuda { graphs: true graph_spec { batch_size: 8 } graph_spec { batch_size: 2 } } }"
    assert graph_buckets(config(spec)) == (2, 8)
    buckets = (1, 2, 4, 8, 16, 24)
    assert [bucket_for(buckets, n) for n in (1, 3, 4, 5, 17, 24, 25)] == [1, 4, 4, 8, 24, 24, None]


def test_buckets_above_32_step_by_eight_not_doubling() -> None:
    """A batch of 65 computes 72 rows, not 128: past 32 the buckets step by 8 (by 16 from 128, 32
    from 256), and max_batch_size is always the last one."""
    assert graph_buckets(config(max_batch_size=128)) == (1, 2, 4, 8, 16, 32, *range(40, 129, 8))
    assert graph_buckets(config(max_batch_size=100)) == (1, 2, 4, 8, 16, 32, *range(40, 97, 8), 100)
    assert graph_buckets(config(max_batch_size=300))[-4:] == (240, 256, 288, 300)
    buckets = graph_buckets(config(max_batch_size=128))
    assert [bucket_for(buckets, n) for n in (33, 65, 100, 127)] == [40, 72, 104, 128]


@pytest.mark.parametrize("limit", [1, 7, 32, 33, 64, 65, 128, 129, 1000])
def test_every_batch_has_a_bucket_padded_by_under_an_eighth_above_32(limit: int) -> None:
    buckets = graph_buckets(config(max_batch_size=limit))
    assert buckets == tuple(sorted(set(buckets))) and buckets[-1] == limit
    for batch in range(1, limit + 1):
        bucket = bucket_for(buckets, batch)
        assert bucket is not None and bucket >= batch
        if batch > 32:
            assert bucket - batch < max(8, batch / 8), (limit, batch, bucket)
    assert len(buckets) <= 6 + 4 + 8 * max(0, (limit // 64).bit_length())  # logarithmic in the limit


def test_platform_names() -> None:
    assert normalise_platform("", "pytorch") == "pytorch_libtorch"
    assert normalise_platform("pytorch_libtorch", "") == "pytorch_libtorch"


def test_platform_from_the_model_file(tmp_path) -> None:
    (tmp_path / "model.pt").write_bytes(b"")
    assert platform_for_file(tmp_path) == "pytorch_libtorch"


def test_without_torch_the_platform_fails_to_load_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.backends.registry import backend_for

    for name in ("torch", "ferry.backends.pytorch", "ferry.backends.torch_loading", "ferry.backends.cuda_graphs"):
        monkeypatch.setitem(sys.modules, name, None)  # as if torch were not installed
    hint = re.escape("platform 'pytorch_libtorch' needs torch") + r".*pip install '\.\[torch\]' in the Ferry checkout"
    with pytest.raises(ModelLoadError, match=hint):
        backend_for("pytorch_libtorch")
