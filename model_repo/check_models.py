"""Check every model in ``model_repo/`` against its ``config.pbtxt`` with onnxruntime.

For each model directory this parses ``config.pbtxt`` (Triton's ModelConfig in
protobuf text format, using the proto bundled with ``ferry_client``), loads
every numbered version's ``model.onnx`` with onnxruntime on CPU, and checks:

* file size < 5 MB, ONNX opset 17 and IR version <= 9 (a model taken from a package,
  with a ``LICENSE.md``, keeps its own opset and IR version and may be up to 12 MB);
* the ONNX inputs/outputs have the config's names, datatypes and shapes (the
  config's dims with the batch dimension prepended when ``max_batch_size > 0``;
  ``-1`` in the config must be dynamic in the ONNX graph);
* a run with a batch of 2 (or unbatched when ``max_batch_size: 0``) succeeds
  and returns outputs of the declared datatype and rank, with concrete sizes
  where the config has them;
* a ``label_filename`` exists and has one line per class of its output.

Run from the repository root::

    python model_repo/check_models.py [model_repo]
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf import text_format

from ferry_client.protocol import model_config_pb2 as mc

MAX_BYTES = 5 * 1024 * 1024
#: Models taken from a package (those with a LICENSE.md) keep the file as shipped: their own
#: opset and IR version, up to this size.
MAX_PACKAGED_BYTES = 12 * 1024 * 1024
OPSET = 17
MAX_IR_VERSION = 9
TEST_BATCH = 2
FREE_DIM = 32  # size used for dims declared as -1 (a multiple of 32, as text detectors need)

# config DataType name -> (onnxruntime type string, numpy dtype carrying the values)
TYPES: dict[str, tuple[str, str]] = {
    "TYPE_BOOL": ("tensor(bool)", "bool"),
    "TYPE_UINT8": ("tensor(uint8)", "uint8"),
    "TYPE_UINT16": ("tensor(uint16)", "uint16"),
    "TYPE_UINT32": ("tensor(uint32)", "uint32"),
    "TYPE_UINT64": ("tensor(uint64)", "uint64"),
    "TYPE_INT8": ("tensor(int8)", "int8"),
    "TYPE_INT16": ("tensor(int16)", "int16"),
    "TYPE_INT32": ("tensor(int32)", "int32"),
    "TYPE_INT64": ("tensor(int64)", "int64"),
    "TYPE_FP16": ("tensor(float16)", "float16"),
    "TYPE_FP32": ("tensor(float)", "float32"),
    "TYPE_FP64": ("tensor(double)", "float64"),
    "TYPE_STRING": ("tensor(string)", "object"),
    "TYPE_BF16": ("tensor(bfloat16)", "uint16"),
}


def expected_shape(config: mc.ModelConfig, dims: list[int]) -> list[int]:
    """Return the full tensor shape the config declares (-1 = any size)."""
    return ([-1] if config.max_batch_size > 0 else []) + list(dims)


def shapes_agree(onnx_shape: list[int | str | None], declared: list[int]) -> bool:
    """True when an ONNX shape (ints, or str/None for symbolic dims) matches the config (a config
    may fix a dim the graph leaves symbolic, as the text-line models' height of 48)."""
    if len(onnx_shape) != len(declared):
        return False
    for got, want in zip(onnx_shape, declared, strict=True):
        if want == -1:
            if isinstance(got, int):
                return False
        elif isinstance(got, int) and got != want:
            return False
    return True


def make_input(type_name: str, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """Return a sample input array of the given config datatype and concrete shape."""
    dtype = np.dtype(TYPES[type_name][1])
    if type_name == "TYPE_STRING":
        return np.array([f"s{i}" for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


def run_session(session: ort.InferenceSession, config: mc.ModelConfig, feeds: dict[str, np.ndarray]):
    """Run the session and return {output name: (ORT type string, shape)} for every output."""
    names = [o.name for o in session.get_outputs()]
    bf16_inputs = {t.name for t in config.input if mc.DataType.Name(t.data_type) == "TYPE_BF16"}
    has_bf16 = bf16_inputs or any(mc.DataType.Name(t.data_type) == "TYPE_BF16" for t in config.output)
    if not has_bf16:
        results = session.run(names, feeds)
        out = {}
        for name, value in zip(names, results, strict=True):
            kind = {"O": "tensor(string)", "U": "tensor(string)"}.get(value.dtype.kind)
            out[name] = (kind or f"numpy:{value.dtype}", list(value.shape))
        return out
    # bfloat16 has no numpy dtype: pass OrtValues and read results as raw buffers.
    values = {
        name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, onnx.TensorProto.BFLOAT16)
        if name in bf16_inputs
        else ort.OrtValue.ortvalue_from_numpy(array)
        for name, array in feeds.items()
    }
    results = session.run_with_ort_values(names, values)
    out = {}
    for name, value in zip(names, results, strict=True):
        size = value.tensor_size_in_bytes()
        if size:
            ctypes.string_at(value.data_ptr(), size)  # the buffer must be readable
        out[name] = (value.data_type(), list(value.shape()))
    return out


def check_model(model_dir: Path) -> list[str]:
    """Return a list of problems found for one model directory (empty when all is well)."""
    problems: list[str] = []
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(encoding="utf-8"), mc.ModelConfig())
    if config.name != model_dir.name:
        problems.append(f"config name {config.name!r} != directory name")
    if config.platform == "ferry_ocr":
        return problems  # no model file: it composes text_detector, text_angle and text_recognizer
    if config.platform != "onnxruntime_onnx":
        problems.append(f"unexpected platform {config.platform!r}")
    versions = sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        problems.append("no numbered version directory")
    rng = np.random.default_rng(0)
    packaged = (model_dir / "LICENSE.md").is_file()
    limit = MAX_PACKAGED_BYTES if packaged else MAX_BYTES
    for version in versions:
        path = version / "model.onnx"
        where = f"{version.name}/model.onnx"
        size = path.stat().st_size
        if size >= limit:
            problems.append(f"{where}: {size} bytes is not < {limit // 2**20} MB")
        proto = onnx.load(str(path))
        opset = {o.domain: o.version for o in proto.opset_import}.get("")
        if opset != OPSET and not packaged:
            problems.append(f"{where}: opset {opset}, expected {OPSET}")
        if proto.ir_version > MAX_IR_VERSION and not packaged:
            problems.append(f"{where}: ir_version {proto.ir_version} > {MAX_IR_VERSION}")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for kind, declared, actual in (
            ("input", config.input, session.get_inputs()),
            ("output", config.output, session.get_outputs()),
        ):
            if [t.name for t in declared] != [a.name for a in actual]:
                problems.append(f"{where}: {kind} names {[a.name for a in actual]} differ from config")
                continue
            for tensor, arg in zip(declared, actual, strict=True):
                type_name = mc.DataType.Name(tensor.data_type)
                if TYPES[type_name][0] != arg.type:
                    problems.append(f"{where}: {kind} {tensor.name} is {arg.type}, config says {type_name}")
                want = expected_shape(config, list(tensor.dims))
                if not shapes_agree(list(arg.shape), want):
                    problems.append(f"{where}: {kind} {tensor.name} shape {arg.shape}, config says {want}")
        if problems:
            continue
        batch = [TEST_BATCH] if config.max_batch_size > 0 else []
        feeds = {
            t.name: make_input(mc.DataType.Name(t.data_type), batch + [FREE_DIM if d == -1 else d for d in t.dims], rng)
            for t in config.input
        }
        results = run_session(session, config, feeds)
        for tensor in config.output:
            type_name = mc.DataType.Name(tensor.data_type)
            got_type, got_shape = results[tensor.name]
            want_type = TYPES[type_name][0]
            if got_type.startswith("numpy:"):
                ok = np.dtype(got_type[6:]) == np.dtype(TYPES[type_name][1])
            else:
                ok = got_type == want_type
            if not ok:
                problems.append(f"{where}: output {tensor.name} came back as {got_type}, expected {want_type}")
            want = batch + list(tensor.dims)
            if len(got_shape) != len(want) or any(w != -1 and g != w for g, w in zip(got_shape, want, strict=True)):
                problems.append(f"{where}: output {tensor.name} has shape {got_shape}, expected {want}")
    for tensor in config.output:
        if tensor.label_filename:
            labels_path = model_dir / tensor.label_filename
            if not labels_path.is_file():
                problems.append(f"label file {tensor.label_filename} missing")
                continue
            lines = labels_path.read_text(encoding="utf-8").splitlines()
            classes = class_count(config, tensor)
            if tensor.label_filename == "characters.txt":
                classes -= 2  # a CTC dictionary: the blank and the space are not in the file
            if len(lines) != classes:
                problems.append(f"{tensor.label_filename}: {len(lines)} labels for {classes} classes")
    return problems


def class_count(config: mc.ModelConfig, tensor: mc.ModelOutput) -> int:
    """How many classes a labelled output's model predicts: a classifier's last dim, or where the
    detection format keeps its class scores."""
    if not (config.HasField("ferry_image") and config.ferry_image.HasField("detection")):
        return tensor.dims[-1]
    detection = config.ferry_image.detection
    dims = {t.name: list(t.dims) for t in config.output}
    names = list(detection.outputs) or list(dims)
    fmt = mc.FerryDetection
    if detection.format == fmt.YOLOV8:
        return dims[names[0]][-2] - 4  # [4 + classes, anchors]
    if detection.format in (fmt.YOLOV5, fmt.YOLOX):
        return dims[names[0]][-1] - 5  # [anchors, 5 + classes]
    if detection.format in (fmt.SSD, fmt.DETR):
        return dims[names[1]][-1]  # scores [anchors or queries, classes]
    if detection.format == fmt.DFL:
        return dims[names[0]][-1]  # first level's scores [cells, classes]
    return tensor.dims[-1]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    failed = 0
    for model_dir in sorted(p for p in root.iterdir() if (p / "config.pbtxt").is_file()):
        config = text_format.Parse((model_dir / "config.pbtxt").read_text(encoding="utf-8"), mc.ModelConfig())
        if config.backend == "pytorch" or config.platform == "pytorch_libtorch":
            print(f"{model_dir.name:15s} skipped: PyTorch backend (its build.py checks it against onnxruntime)")
            continue
        problems = check_model(model_dir)
        sizes = ", ".join(
            f"v{p.parent.name} {p.stat().st_size:,} B" for p in sorted(model_dir.glob("[0-9]*/model.onnx"))
        )
        status = "ok" if not problems else "FAILED"
        print(f"{model_dir.name:15s} max_batch_size={config.max_batch_size:<3d} {sizes:20s} {status}")
        for problem in problems:
            print(f"    {problem}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
