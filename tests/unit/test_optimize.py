"""ferry optimize on the digits classifier in a temporary repository: real quantization and
conversion with onnxruntime's tools, real sessions, configs read back by the repository parser."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantType
from PIL import Image
from sklearn.datasets import load_digits

from ferry.cli import main
from ferry.optimize.calibration import OptimizeError
from ferry.optimize.cpu import CpuInt8Features, choose_int8_scheme, read_cpu_features
from ferry.optimize.run import AccuracyRefused, OptimizeOptions, optimize
from ferry.repository.config import read_config_file
from ferry.repository.model import load_version
from ferry_client.protocol import model_config_pb2 as mc


def count_qdq_nodes(path: Path) -> dict[str, int]:
    """How many QuantizeLinear / DequantizeLinear nodes a model has (zero for an unquantized one)."""
    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
    return counts


REPO = Path(__file__).resolve().parents[2] / "model_repo"


@pytest.fixture(scope="module")
def digits_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(repository with digits, calibration PNGs of the training digits, held-out test PNGs)."""
    root = tmp_path_factory.mktemp("optimize")
    shutil.copytree(REPO / "digits", root / "repo" / "digits")
    digits = load_digits()
    test = set(np.load(REPO / "digits" / "test_split.npz")["test_indices"].tolist())
    for index, pixels in enumerate(digits.images):
        folder = root / ("test" if index in test else "calib")
        folder.mkdir(exist_ok=True)
        image = Image.fromarray(np.round(pixels * 255 / 16).astype(np.uint8), mode="L")
        image.save(folder / f"{index:04d}.png")
    return root / "repo", root / "calib", root / "test"


def _options(repo: Path, **extra) -> OptimizeOptions:
    return OptimizeOptions(model_dir=repo / "digits", show_progress=False, **extra)


def test_int8_writes_a_qdq_model_that_serves_and_agrees(digits_repo) -> None:
    repo, calib, test = digits_repo
    result = optimize(
        _options(
            repo,
            precision="int8",
            calibration_images=calib,
            calibration_count=200,
            eval_images=test,
            output_name="digits_int8_t",
        ),
        say=lambda _: None,
    )
    assert result.model_file == repo / "digits_int8_t" / "1" / "model.onnx"
    counts = count_qdq_nodes(result.model_file)
    assert counts["QuantizeLinear"] >= 5 and counts["DequantizeLinear"] >= 10  # convs and gemms quantized
    assert count_qdq_nodes(repo / "digits" / "1" / "model.onnx") == {"QuantizeLinear": 0, "DequantizeLinear": 0}
    report = result.report
    assert report.samples == 360 and report.task == "classify"
    assert report.top1_agreement >= 0.98
    assert 0 < report.max_abs_diff < report.reference_max_abs
    config = read_config_file(repo / "digits_int8_t")  # the repository parser reads what was written
    assert config.name == "digits_int8_t" and config.platform == "onnxruntime_onnx"
    assert config.HasField("ferry_image") and config.max_batch_size == 64
    assert "top-1 agreement" in (repo / "digits_int8_t" / "config.pbtxt").read_text()
    model = load_version(repo / "digits_int8_t", 1, config, "test")
    try:
        png = io.BytesIO()
        Image.fromarray(np.round(load_digits().images[7] * 255 / 16).astype(np.uint8), mode="L").save(png, "PNG")
        batch = model.pipeline.prepare([png.getvalue()]).batch
        logits = model.instances[0].compute({"input": batch}, ["logits"])["logits"]
        assert int(logits.argmax()) == int(load_digits().target[7])
    finally:
        model.close()
    assert (repo / "digits_int8_t" / "labels.txt").read_text() == (repo / "digits" / "labels.txt").read_text()
    assert not [p for p in repo.iterdir() if p.name.startswith(".")]  # staging removed


def test_int8_below_the_threshold_is_refused_unless_forced(digits_repo) -> None:
    repo, calib, _ = digits_repo
    options = _options(
        repo,
        precision="int8",
        calibration_images=calib,
        calibration_count=64,
        eval_count=64,
        output_name="digits_refused",
        min_agreement=1.01,
    )
    with pytest.raises(AccuracyRefused, match="below --min-agreement 1.01") as caught:
        optimize(options, say=lambda _: None)
    assert caught.value.report.samples == 64
    assert not (repo / "digits_refused").exists()
    options.force = True
    assert optimize(options, say=lambda _: None).model_file.is_file()


def test_int8_judged_on_too_few_images_is_refused_and_the_report_says_how_many(digits_repo, tmp_path) -> None:
    """Three images agree 100% and prove nothing: the gate names how many it compared and its minimum."""
    repo, calib, _ = digits_repo
    few = tmp_path / "few"
    few.mkdir()
    for image in sorted(calib.iterdir())[:3]:
        shutil.copy(image, few / image.name)
    options = _options(repo, precision="int8", calibration_images=few, output_name="digits_few")
    with pytest.raises(AccuracyRefused, match="compared on only 3 inputs, fewer than --min-compared 50") as caught:
        optimize(options, say=lambda _: None)
    lines = caught.value.report.lines()
    assert lines[0] == f"compared on 3 images from {few} (the INT8 gate needs at least 50 inputs: --min-compared)"
    assert not (repo / "digits_few").exists()
    options.min_compared = 3  # the user's call: judged on what was given
    assert optimize(options, say=lambda _: None).model_file.is_file()


def test_fp16_keeps_fp32_io_and_stays_close(digits_repo) -> None:
    repo, _, test = digits_repo
    result = optimize(_options(repo, precision="fp16", eval_images=test, eval_count=100), say=lambda _: None)
    assert result.model_dir == repo / "digits_fp16"
    import onnx

    model = onnx.load(str(result.model_file))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in model.graph.initializer)
    assert result.report.max_abs_diff < 0.05 and result.report.top1_agreement == 1.0
    config = read_config_file(result.model_dir)
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_AUTO  # GPU when there is one


def test_new_version_and_cli_errors(digits_repo, capsys) -> None:
    repo, calib, _ = digits_repo
    code = main(
        [
            "optimize",
            str(repo / "digits"),
            "--precision",
            "int8",
            "--calibration-images",
            str(calib),
            "--calibration-count",
            "64",
            "--eval-count",
            "64",
            "--as-version",
            "2",
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert (repo / "digits" / "2" / "model.onnx").is_file()
    assert count_qdq_nodes(repo / "digits" / "2" / "model.onnx")["QuantizeLinear"] > 0
    shutil.rmtree(repo / "digits" / "2")
    assert main(["optimize", str(repo / "digits"), "--precision", "int8", "--quiet"]) == 1
    assert "needs calibration data" in capsys.readouterr().err
    assert main(["optimize", str(repo / "nope"), "--precision", "fp16", "--quiet"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["optimize", str(repo), "--precision", "fp16", "--quiet"]) == 1  # the repository, not a model
    err = capsys.readouterr().err
    assert f"{repo} looks like a model repository (it holds digits" in err and "version None" not in err
    assert f"`ferry optimize` takes one model's directory, e.g. {repo / 'digits'}" in err
    (repo / "bare").mkdir()
    assert main(["optimize", str(repo / "bare"), "--precision", "fp16", "--quiet"]) == 1
    assert "no version directories (1/, 2/, ... holding the model file)" in capsys.readouterr().err
    empty = calib.parent / "empty"
    empty.mkdir(exist_ok=True)
    assert (
        main(
            [
                "optimize",
                str(repo / "digits"),
                "--precision",
                "int8",
                "--calibration-images",
                str(empty),
                "--quiet",
                "--output-name",
                "x",
            ]
        )
        == 1
    )
    assert "no images" in capsys.readouterr().err
    assert main(["optimize", str(repo / "digits"), "--precision", "fp16", "--engine", "tensorrt", "--quiet"]) == 1
    assert "cannot build a TensorRT engine here" in capsys.readouterr().err


def test_int8_scheme_follows_the_cpu(tmp_path: Path) -> None:
    vnni = CpuInt8Features("x86_64", frozenset({"avx2", "avx512_vnni"}))
    plain = CpuInt8Features("x86_64", frozenset({"avx2"}))
    arm = CpuInt8Features("aarch64", frozenset({"asimddp"}))
    assert choose_int8_scheme(vnni).name == "U8S8"
    assert choose_int8_scheme(plain).name == "U8S8 reduce_range"
    assert choose_int8_scheme(arm).name == "S8S8"
    trt = choose_int8_scheme(vnni, for_tensorrt=True)
    assert trt.activation_type == QuantType.QInt8 and trt.symmetric_activations
    assert choose_int8_scheme(plain, override="s8s8", reduce_range=False).name == "S8S8"
    with pytest.raises(ValueError, match="symmetric S8S8"):
        choose_int8_scheme(vnni, for_tensorrt=True, override="u8s8")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx_vnni\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert read_cpu_features(cpuinfo, "x86_64").vnni
    assert read_cpu_features(tmp_path / "missing", "x86_64").flags == frozenset()


def test_calibration_needs_an_image_pipeline(tmp_path: Path) -> None:
    shutil.copytree(REPO / "simple_fp32", tmp_path / "simple_fp32")
    (tmp_path / "imgs").mkdir()
    Image.new("L", (8, 8)).save(tmp_path / "imgs" / "a.png")
    options = OptimizeOptions(
        model_dir=tmp_path / "simple_fp32", precision="int8", calibration_images=tmp_path / "imgs", show_progress=False
    )
    with pytest.raises(OptimizeError, match="no ferry_image section"):
        optimize(options, say=lambda _: None)
    tensors = tmp_path / "x.npy"
    np.save(tensors, np.random.default_rng(0).random((16, 16), dtype=np.float32))
    options = OptimizeOptions(
        model_dir=tmp_path / "simple_fp32", precision="int8", calibration_tensors=tensors, show_progress=False
    )
    with pytest.raises(OptimizeError, match="feeds one input, but model 'simple_fp32' has 2"):
        optimize(options, say=lambda _: None)


def _detector_build():
    import importlib.util

    spec = importlib.util.spec_from_file_location("digit_detector_build", REPO / "digit_detector" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_detector_int8_reports_map_against_fp32_and_ground_truth(tmp_path: Path) -> None:
    """Held-out synthetic scenes as PNG files with their boxes: the mAP delta comes from real detections."""
    import json

    build = _detector_build()
    shutil.copytree(REPO / "digit_detector", tmp_path / "repo" / "digit_detector")
    scenes = build.held_out_scenes(count=48)
    (tmp_path / "scenes").mkdir()
    truth = {}
    for index, scene in enumerate(scenes):
        Image.fromarray(scene.image).save(tmp_path / "scenes" / f"{index:03d}.png")
        truth[f"{index:03d}.png"] = [
            [*map(float, box), int(c)] for box, c in zip(scene.boxes, scene.classes, strict=True)
        ]
    (tmp_path / "truth.json").write_text(json.dumps(truth))
    result = optimize(
        OptimizeOptions(
            model_dir=tmp_path / "repo" / "digit_detector",
            precision="int8",
            calibration_images=tmp_path / "scenes",
            eval_annotations=tmp_path / "truth.json",
            show_progress=False,
        ),
        say=lambda _: None,
    )
    report = result.report
    assert report.task == "detect" and report.top1_agreement is None
    assert 0.9 <= report.map_vs_reference <= 1.0
    # The one output mixes boxes (0..128 px) and sigmoid scores: kept in float, scores stay
    # probabilities and close to FP32's (quantized with one scale they came out 0.501 or 1.0025).
    assert report.scores_outside_unit == 0
    assert report.matched_share is not None and report.matched_share > 0.95
    assert report.score_diff_p95 is not None and report.score_diff_p95 <= 0.1
    assert report.box_iou_mean is not None and report.box_iou_mean >= 0.95
    written = onnx.load(str(result.model_file))
    producer = {out: node for node in written.graph.node for out in node.output}
    head = producer["output0"]
    assert head.op_type == "Concat"
    assert all(producer[name].op_type != "DequantizeLinear" for name in head.input if name in producer)
    assert any("output heads kept in float" in note for note in result.notes)
    assert report.map_reference > 0.85  # the FP32 detector on held-out scenes (README: 0.97 on 200)
    assert abs(report.map_delta) < 0.05
    assert any("delta" in line for line in report.lines())
    (tmp_path / "bad.json").write_text(json.dumps({"000.png": [[0, 0, 1, 1, 0]]}))
    with pytest.raises(OptimizeError, match="no entry for 47 image"):
        optimize(
            OptimizeOptions(
                model_dir=tmp_path / "repo" / "digit_detector",
                precision="fp16",
                eval_images=tmp_path / "scenes",
                eval_annotations=tmp_path / "bad.json",
                show_progress=False,
            ),
            say=lambda _: None,
        )


def test_quantized_output_heads_are_caught_by_the_score_and_box_gate(tmp_path: Path) -> None:
    """With --quantize-output-heads the mixed output shares one INT8 scale: mAP still looks fine, but
    the scores leave 0..1 and move by far more than the gate allows, so nothing is written."""
    build = _detector_build()
    shutil.copytree(REPO / "digit_detector", tmp_path / "repo" / "digit_detector")
    (tmp_path / "scenes").mkdir()
    for index, scene in enumerate(build.held_out_scenes(count=24)):
        Image.fromarray(scene.image).save(tmp_path / "scenes" / f"{index:03d}.png")
    options = OptimizeOptions(
        model_dir=tmp_path / "repo" / "digit_detector",
        precision="int8",
        calibration_images=tmp_path / "scenes",
        quantize_outputs=True,
        show_progress=False,
    )
    with pytest.raises(AccuracyRefused, match=r"detection scores (are outside 0\.\.1|moved by)") as refused:
        optimize(options, say=lambda _: None)
    report = refused.value.report
    assert report.map_vs_reference > 0.9  # what the old gate looked at, and passed
    assert report.scores_outside_unit > 0 or report.score_diff_p95 > 0.1
    assert not (tmp_path / "repo" / "digit_detector_int8").exists()


def test_float_output_nodes_stop_at_the_last_weighted_layers() -> None:
    from ferry.optimize.int8 import float_output_nodes

    model = onnx.load(str(REPO / "digit_detector" / "1" / "model.onnx"))
    kept = set(float_output_nodes(model))
    ops = {node.name: node.op_type for node in model.graph.node}
    assert {"/Concat_4", "/Sigmoid", "/Exp"} <= kept  # decode arithmetic and the mixing Concat
    assert sum(ops[name] == "Conv" for name in kept) == 4  # the box and class convs of two heads
    assert sum(op == "Conv" for op in ops.values()) > 4  # the backbone stays quantizable


def test_int8_of_a_model_without_batch_dimension(tmp_path: Path) -> None:
    """face_detector (max_batch_size 0, opset 11) is calibrated and compared one image per execution."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("face_reference", REPO / "face_detector" / "reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    shutil.copytree(REPO / "face_detector", tmp_path / "repo" / "face_detector")
    (tmp_path / "photos").mkdir()
    for name, data in reference.photos().items():
        (tmp_path / "photos" / f"{name}.png").write_bytes(data)
    options = OptimizeOptions(
        model_dir=tmp_path / "repo" / "face_detector",
        precision="int8",
        calibration_images=tmp_path / "photos",
        show_progress=False,
    )
    with pytest.raises(AccuracyRefused, match=r"compared on only \d+ FP32 detections") as caught:
        optimize(options, say=lambda _: None)  # a handful of faces: "found again 100%" proves nothing
    found = caught.value.report.detections
    assert 0 < found < 50
    assert (
        f", {found} FP32 detections (the INT8 gate needs at least 50 FP32 detections" in caught.value.report.lines()[0]
    )
    assert f"({found} of {found})" in "\n".join(caught.value.report.lines())
    options.min_compared = found
    result = optimize(options, say=lambda _: None)
    report = result.report
    assert report.task == "detect" and report.samples == len(reference.photos())
    assert report.map_vs_reference >= 0.9 and report.scores_outside_unit == 0
    assert count_qdq_nodes(result.model_file)["QuantizeLinear"] > 0
    config = read_config_file(tmp_path / "repo" / "face_detector_int8")
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [1, 3, 128, 128]
    model = load_version(tmp_path / "repo" / "face_detector_int8", 1, config, "test")
    try:
        prepared = model.pipeline.prepare([reference.photos()["astronaut"]])
        [(_, tensor)] = model.pipeline.executions(prepared.batch)
        outputs = model.instances[0].compute({model.pipeline.input_name: tensor}, list(model.outputs))
        assert outputs["regressors"].shape == (1, 896, 16)
    finally:
        model.close()


def test_no_progress_bars_when_stderr_is_not_a_terminal(digits_repo) -> None:
    """stderr to a file or a log collector gets the plain progress lines, never a bar's \\r updates."""
    import subprocess
    import sys

    repo, calib, test = digits_repo
    command = [
        *(sys.executable, "-m", "ferry", "optimize", str(repo / "digits"), "--precision", "int8"),
        *("--calibration-images", str(calib), "--calibration-count", "64", "--eval-images", str(test)),
        *("--eval-count", "64", "--output-name", "digits_int8_pipe", "--batch-size", "8"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "img/s" not in done.stderr and "calibrating" not in done.stderr
    assert "checking digits_int8_pipe against the FP32 model" in done.stderr  # the plain lines remain
