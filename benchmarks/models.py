"""Builds the serving benchmark's model repository: a random-weight ResNet-50 and a tiny model.

The ResNet-50 is built from onnx.helper and numpy alone, so the benchmark needs no torch and no
downloads; its weights are random because only the compute cost matters here, not the accuracy.
The tiny model does almost no work, so serving it measures the server's per-request overhead.

Run ``python benchmarks/models.py [--repo DIR]`` to (re)build the repository.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_REPO = Path(__file__).resolve().parent / "models" / "repo"
OPSET = 17
IMAGE_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
TINY_WIDTH = 16
MAX_BATCH_SIZE = 32

# Stage layout of ResNet-50: (bottleneck width, number of blocks); the output has 4x the width.
STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))
EXPANSION = 4
# Without BatchNorm every residual Add would grow the activation variance; scaling the last conv
# of each residual branch down (as Fixup does) keeps 16 blocks of growth within a small factor.
BRANCH_OUT_GAIN = 0.2

RESNET_CONFIG = f"""# Random-weight ResNet-50 for the serving benchmark (built by benchmarks/models.py).
name: "resnet50"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{
    name: "input"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
  }}
]
output [
  {{
    name: "logits"
    data_type: TYPE_FP32
    dims: [ {NUM_CLASSES} ]
  }}
]
instance_group [
  {{
    kind: KIND_CPU
    count: 1
  }}
]
dynamic_batching {{ }}
"""

TINY_CONFIG = f"""# output = input + 1: almost no compute, so serving it measures per-request overhead.
name: "tiny"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{
    name: "input"
    data_type: TYPE_FP32
    dims: [ {TINY_WIDTH} ]
  }}
]
output [
  {{
    name: "output"
    data_type: TYPE_FP32
    dims: [ {TINY_WIDTH} ]
  }}
]
instance_group [
  {{
    kind: KIND_CPU
    count: 1
  }}
]
dynamic_batching {{ }}
"""


class _GraphBuilder:
    """Collects nodes and initializers and hands out unique tensor names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0

    def _name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def _constant(self, prefix: str, array: np.ndarray) -> str:
        name = self._name(prefix)
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(
        self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, gain: float = 1.0, relu: bool = True
    ) -> str:
        """Conv (He-normal weights times ``gain``, small random bias), optionally followed by ReLU."""
        fan_in = c_in * kernel * kernel
        std = gain * math.sqrt(2.0 / fan_in)
        weight = self.rng.standard_normal((c_out, c_in, kernel, kernel), dtype=np.float32) * std
        bias = self.rng.standard_normal(c_out, dtype=np.float32) * 0.01
        w_name = self._constant("conv_w", weight)
        b_name = self._constant("conv_b", bias)
        out = self._name("conv")
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, w_name, b_name],
                [out],
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=[pad, pad, pad, pad],
            )
        )
        return self.relu(out) if relu else out

    def relu(self, x: str) -> str:
        out = self._name("relu")
        self.nodes.append(helper.make_node("Relu", [x], [out]))
        return out

    def add(self, a: str, b: str) -> str:
        out = self._name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [out]))
        return out

    def bottleneck(self, x: str, c_in: int, width: int, stride: int) -> tuple[str, int]:
        """1x1 reduce, 3x3 (carrying the stride), 1x1 expand, shortcut, Add, ReLU."""
        c_out = width * EXPANSION
        y = self.conv(x, c_in, width, 1)
        y = self.conv(y, width, width, 3, stride=stride)
        y = self.conv(y, width, c_out, 1, gain=BRANCH_OUT_GAIN, relu=False)
        if stride != 1 or c_in != c_out:
            # Projection shortcut: linear, so unit-variance (gain 1/sqrt(2)) rather than ReLU gain.
            shortcut = self.conv(x, c_in, c_out, 1, stride=stride, gain=math.sqrt(0.5), relu=False)
        else:
            shortcut = x
        return self.relu(self.add(y, shortcut)), c_out


def build_resnet50(seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 v1.5 topology with conv biases instead of BatchNorm and random weights."""
    g = _GraphBuilder(seed)
    x = g.conv("input", 3, 64, 7, stride=2)
    pooled = "stem_pool"
    g.nodes.append(helper.make_node("MaxPool", [x], [pooled], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, channels = pooled, 64
    for stage, (width, blocks) in enumerate(STAGES):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x, channels = g.bottleneck(x, channels, width, stride)
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    g.nodes.append(helper.make_node("Flatten", ["gap"], ["features"], axis=1))
    fc_w = g.rng.standard_normal((channels, NUM_CLASSES), dtype=np.float32) * math.sqrt(1.0 / channels)
    fc_b = np.zeros(NUM_CLASSES, dtype=np.float32)
    w_name = g._constant("fc_w", fc_w)
    b_name = g._constant("fc_b", fc_b)
    g.nodes.append(helper.make_node("Gemm", ["features", w_name, b_name], ["logits"]))
    graph = helper.make_graph(
        g.nodes,
        "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *IMAGE_SHAPE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", NUM_CLASSES])],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-benchmarks")
    model.ir_version = 8  # what opset 17 was released with; every onnxruntime >= 1.13 reads it
    onnx.checker.check_model(model)
    return model


def build_tiny() -> onnx.ModelProto:
    """output = input + 1 on FP32 [N, 16]."""
    one = numpy_helper.from_array(np.ones(1, dtype=np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["input", "one"], ["output"])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", TINY_WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", TINY_WIDTH])],
        initializer=[one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ferry-benchmarks")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def sample_image(seed: int = 1234, batch: int = 1) -> np.ndarray:
    """A fixed random input (roughly normalized-image statistics) shared by raw and served runs."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, *IMAGE_SHAPE), dtype=np.float32)


def check_resnet50(model_file: Path) -> np.ndarray:
    """Run the built model on batch 2 and insist that the logits have the right shape and are finite."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    batch = np.concatenate([sample_image(), sample_image(seed=99)])
    (logits,) = session.run(["logits"], {"input": batch})
    if logits.shape != (2, NUM_CLASSES):
        raise RuntimeError(f"resnet50 produced logits of shape {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise RuntimeError("resnet50 produced non-finite logits")
    if float(np.std(logits)) == 0.0:
        raise RuntimeError("resnet50 produced constant logits")
    return logits


def _write(model: onnx.ModelProto, config: str, model_dir: Path) -> Path:
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    model_file = model_dir / "1" / "model.onnx"
    onnx.save(model, str(model_file))
    (model_dir / "config.pbtxt").write_text(config)
    return model_file


def build_repository(repo: Path = DEFAULT_REPO, force: bool = False) -> Path:
    """Write resnet50/ and tiny/ into ``repo`` (skipped when present unless ``force``) and check them."""
    resnet_file = repo / "resnet50" / "1" / "model.onnx"
    if force or not resnet_file.exists():
        resnet_file = _write(build_resnet50(), RESNET_CONFIG, repo / "resnet50")
    tiny_file = repo / "tiny" / "1" / "model.onnx"
    if force or not tiny_file.exists():
        _write(build_tiny(), TINY_CONFIG, repo / "tiny")
    check_resnet50(resnet_file)
    return repo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"repository directory ({DEFAULT_REPO})")
    parser.add_argument("--force", action="store_true", help="rebuild even when the models exist")
    args = parser.parse_args(argv)
    build_repository(args.repo, force=args.force)
    logits = check_resnet50(args.repo / "resnet50" / "1" / "model.onnx")
    print(
        f"built {args.repo}: resnet50 logits finite, std {float(np.std(logits)):.3g}, "
        f"max |x| {float(np.abs(logits).max()):.3g}; tiny"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
