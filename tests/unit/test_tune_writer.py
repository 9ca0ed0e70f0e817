"""Where ``ferry tune`` writes the winning config, and that it never overwrites without ``--write``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.repository.config import read_config_file
from ferry.tune.runner import PrivateRepository
from ferry.tune.writer import BACKUP_SUFFIX, TUNED_FILENAME, write_config
from ferry_client.protocol import model_config_pb2 as mc

MODEL_REPO = Path(__file__).resolve().parents[2] / "model_repo"
ORIGINAL = 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'


def _model(tmp_path: Path) -> Path:
    model_dir = tmp_path / "repo" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(ORIGINAL)
    return model_dir


def _tuned(name: str = "m") -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=16)
    config.dynamic_batching.max_queue_delay_microseconds = 100
    return config


def test_without_write_the_tuned_config_goes_next_to_the_original(tmp_path: Path) -> None:
    model_dir = _model(tmp_path)
    written = write_config(model_dir, _tuned(), ["Measured on a test."], write=False)
    assert written.path == model_dir / TUNED_FILENAME
    assert (model_dir / "config.pbtxt").read_text() == ORIGINAL
    text = written.path.read_text()
    assert text.startswith("# Tuned by `ferry tune` at ") and "# Measured on a test.\n" in text
    assert "max_queue_delay_microseconds: 100" in text


def test_write_replaces_config_pbtxt_and_keeps_the_old_one(tmp_path: Path) -> None:
    model_dir = _model(tmp_path)
    written = write_config(model_dir, _tuned(), [], write=True)
    assert written.path == model_dir / "config.pbtxt"
    assert (model_dir / ("config.pbtxt" + BACKUP_SUFFIX)).read_text() == ORIGINAL
    config = read_config_file(model_dir)
    assert config is not None and config.max_batch_size == 16 and config.HasField("dynamic_batching")


def test_a_precision_winner_is_installed_as_its_own_model_never_over_one(tmp_path: Path) -> None:
    model_dir = _model(tmp_path)
    variant = tmp_path / "private" / "m_int8"
    (variant / "1").mkdir(parents=True)
    (variant / "1" / "model.onnx").write_bytes(b"int8 model")
    written = write_config(model_dir, _tuned("m_int8"), [], write=False, variant_dir=variant)
    assert written.path == model_dir / TUNED_FILENAME and not (model_dir.parent / "m_int8").exists()
    assert "ferry optimize" in written.notes[0]
    written = write_config(model_dir, _tuned("m_int8"), [], write=True, variant_dir=variant)
    installed = model_dir.parent / "m_int8"
    assert written.path == installed / "config.pbtxt" and (installed / "1" / "model.onnx").read_bytes() == b"int8 model"
    assert (model_dir / "config.pbtxt").read_text() == ORIGINAL
    with pytest.raises(FileExistsError):
        write_config(model_dir, _tuned("m_int8"), [], write=True, variant_dir=variant)


COMMENTED = (
    "# The digits classifier: keep max_batch_size at 64, the clients send whole pages.\n"
    'name: "m"\n'
    'platform: "onnxruntime_onnx"  # built by build.py\n'
    'parameters { key: "note" value { string_value: "a # inside a string" } }\n'
    "max_batch_size: 8\n"
)


def test_the_original_comments_are_kept_and_a_second_tune_does_not_stack_headers(tmp_path: Path) -> None:
    model_dir = _model(tmp_path)
    (model_dir / "config.pbtxt").write_text(COMMENTED)
    first = write_config(model_dir, _tuned(), ["Measured on a test."], write=True).path.read_text()
    kept = [
        "# Comments of the config before tuning:",
        "# The digits classifier: keep max_batch_size at 64, the clients send whole pages.",
        '# built by build.py (beside: platform: "onnxruntime_onnx")',
    ]
    assert all(line in first.splitlines() for line in kept), first
    assert "a # inside a string" not in first  # a string, not a comment (and not a field of the tuned config)
    second = write_config(model_dir, _tuned(), ["Measured again."], write=True).path.read_text()
    assert second.count("Tuned by `ferry tune`") == 1 and "Measured on a test." not in second
    assert all(second.splitlines().count(line) == 1 for line in kept), second


def test_the_private_repository_holds_the_models_an_ocr_model_runs() -> None:
    """``ferry tune model_repo/ocr`` failed with "text_detector not in repository": its steps come along."""
    repository = PrivateRepository(MODEL_REPO / "ocr")
    try:
        names = sorted(p.name for p in repository.root.iterdir() if p.is_dir())
        assert names == ["ocr", "text_angle", "text_detector", "text_recognizer"]
        assert (repository.root / "text_detector" / "config.pbtxt").is_file()
    finally:
        repository.remove()
    assert not repository.root.exists()
