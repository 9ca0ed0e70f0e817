"""Accuracy of `ferry optimize` outputs on the bundled trained models, run as the command.

Run ``python benchmarks/optimize_accuracy.py``. In a temporary copy of the repository it writes

* the digits classifier's images as PNG files: the 1,437 training digits (calibration) and the 360
  held-out ones (evaluation), split by ``model_repo/digits/test_split.npz``;
* the digit detector's scenes: 200 calibration scenes drawn from the detector's *training* digit
  pool and the 200 held-out evaluation scenes (``held_out_scenes``) with their boxes as an
  annotations file;

then runs ``ferry optimize`` for INT8 and FP16 on both and writes what it printed to
benchmarks/results/optimize-accuracy.md.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _detector_build():
    spec = importlib.util.spec_from_file_location(
        "digit_detector_build", ROOT / "model_repo" / "digit_detector" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def write_digits(root: Path) -> tuple[Path, Path]:
    digits = load_digits()
    held_out = set(np.load(ROOT / "model_repo" / "digits" / "test_split.npz")["test_indices"].tolist())
    for name in ("digits_calib", "digits_test"):
        (root / name).mkdir()
    for index, pixels in enumerate(digits.images):
        image = Image.fromarray(np.round(pixels * 255 / 16).astype(np.uint8), mode="L")
        image.save(root / ("digits_test" if index in held_out else "digits_calib") / f"{index:04d}.png")
    return root / "digits_calib", root / "digits_test"


def write_scenes(root: Path) -> tuple[Path, Path, Path]:
    build = _detector_build()
    train_pool, _ = build.digit_pools()
    rng = np.random.default_rng(7)
    calib, test = root / "scenes_calib", root / "scenes_test"
    calib.mkdir()
    test.mkdir()
    for index in range(200):
        width, height = build.HELD_OUT_SIZES[index % len(build.HELD_OUT_SIZES)]
        Image.fromarray(build.make_scene(rng, width, height, train_pool).image).save(calib / f"{index:03d}.png")
    truth = {}
    for index, scene in enumerate(build.held_out_scenes()):
        Image.fromarray(scene.image).save(test / f"{index:03d}.png")
        truth[f"{index:03d}.png"] = [
            [*map(float, box), int(c)] for box, c in zip(scene.boxes, scene.classes, strict=True)
        ]
    annotations = root / "scenes_truth.json"
    annotations.write_text(json.dumps(truth))
    return calib, test, annotations


def optimize(*args: str) -> str:
    command = [sys.executable, "-m", "ferry", "optimize", *args, "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True)
    text = (done.stdout + done.stderr).strip()
    print(text, flush=True)
    return text


def main() -> int:
    sections = []
    with tempfile.TemporaryDirectory(prefix="ferry-accuracy-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        for name in ("digits", "digit_detector"):
            shutil.copytree(ROOT / "model_repo" / name, repo / name)
        digits_calib, digits_test = write_digits(root)
        scenes_calib, scenes_test, truth = write_scenes(root)
        runs = [
            (
                "digits INT8",
                [
                    str(repo / "digits"),
                    "--precision",
                    "int8",
                    "--calibration-images",
                    str(digits_calib),
                    "--eval-images",
                    str(digits_test),
                ],
            ),
            ("digits FP16", [str(repo / "digits"), "--precision", "fp16", "--eval-images", str(digits_test)]),
            (
                "digit_detector INT8",
                [
                    str(repo / "digit_detector"),
                    "--precision",
                    "int8",
                    "--calibration-images",
                    str(scenes_calib),
                    "--eval-images",
                    str(scenes_test),
                    "--eval-annotations",
                    str(truth),
                ],
            ),
            (
                "digit_detector FP16",
                [
                    str(repo / "digit_detector"),
                    "--precision",
                    "fp16",
                    "--eval-images",
                    str(scenes_test),
                    "--eval-annotations",
                    str(truth),
                ],
            ),
        ]
        for title, args in runs:
            print(f"== {title}", flush=True)
            output = optimize(*args).replace(f"{root}/", "")
            sections.append(
                f"## {title}\n\n```\n$ ferry optimize {' '.join(a.replace(f'{root}/', '') for a in args)}"
                f"\n{output}\n```\n"
            )
    import onnxruntime

    text = (
        "# `ferry optimize` accuracy on the bundled trained models\n\n"
        f"`python benchmarks/optimize_accuracy.py` (onnxruntime {onnxruntime.__version__}, CPU execution "
        "provider; FP16 models run on the CPU provider, which computes unsupported FP16 operators in FP32 "
        "between casts, so GPU numbers can differ slightly). Paths are relative to a temporary directory.\n\n"
        + "\n".join(sections)
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "optimize-accuracy.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
