"""``ferry``'s command line, in process: every user mistake is one line on stderr and a non-zero exit
code (never a traceback), ``--help`` shows defaults, and the repository may be given positionally."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from ferry import cli
from ferry.cli_errors import missing_extra
from ferry.settings import Settings


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of ``ferry ARGV``; ``serve`` never starts a server (asserted by the caller)."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own exits (--help, bad flags)
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Replace the server with a recorder, so a command that gets past the checks is seen, not run."""
    started: list[Settings] = []
    monkeypatch.setattr("ferry.server.serve", started.append)
    return started


def assert_one_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_missing_repository(capsys, no_serving, tmp_path: Path) -> None:
    code, err = run(["serve", str(tmp_path / "absent")], capsys)
    assert code == 1 and not no_serving
    assert_one_line(err, "does not exist", "absent")


def test_repository_that_is_a_file(capsys, no_serving, tmp_path: Path) -> None:
    (tmp_path / "models.txt").write_text("not a folder")
    code, err = run(["serve", "--model-repository", str(tmp_path / "models.txt")], capsys)
    assert code == 1 and not no_serving
    assert_one_line(err, "is not a directory")


@pytest.mark.parametrize("layout", ["config.pbtxt", "1/model.onnx"])
def test_a_model_directory_given_as_the_repository(capsys, no_serving, tmp_path: Path, layout: str) -> None:
    """A model's own folder (its config, or a version folder holding the model file) is not a repository."""
    model = tmp_path / "digits"
    (model / layout).parent.mkdir(parents=True, exist_ok=True)
    (model / layout).write_bytes(b"")
    code, err = run(["serve", str(model)], capsys)
    assert code == 1 and not no_serving
    assert_one_line(err, "this looks like a model directory; give its parent", f"'{tmp_path}'")


def test_a_repository_with_a_model_named_like_a_version_is_served(capsys, no_serving, tmp_path: Path) -> None:
    (tmp_path / "1" / "1").mkdir(parents=True)  # a model named "1", its version 1 inside
    (tmp_path / "1" / "1" / "model.onnx").write_bytes(b"")
    code, _ = run(["serve", str(tmp_path)], capsys)
    assert code == 0 and no_serving


def test_unreadable_repository(capsys, no_serving, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root in CI, and root reads every directory whatever its mode: so the permission
    # check itself answers "no" here, for this one directory.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == tmp_path else real_access(path, mode))
    code, err = run(["serve", str(tmp_path)], capsys)
    assert code == 1 and not no_serving
    assert_one_line(err, "not readable")


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--http-port", "abc"], ["--http-port", "invalid int value: 'abc'"]),
        (["--grpc-port", "70000"], ["--grpc-port / FERRY_GRPC_PORT", "65535", "70000"]),
        (["--repository-poll-secs", "0"], ["--repository-poll-secs", "greater than 0"]),
        (["--model-control-mode", "sometimes"], ["--model-control-mode", "invalid choice"]),
        (["--no-such-flag"], ["unrecognized arguments: --no-such-flag (see 'ferry serve --help')"]),
        (["--http-prot", "9000"], ["unrecognized arguments: --http-prot 9000; did you mean --http-port?"]),
        (
            ["--http-prot=9000", "--grpc-prot", "1"],
            ["--http-prot: did you mean --http-port?; --grpc-prot: did you mean --grpc-port?"],
        ),
    ],
)
def test_bad_flag_values(capsys, no_serving, tmp_path: Path, argv: list[str], fragments: list[str]) -> None:
    code, err = run(["serve", str(tmp_path), *argv], capsys)
    assert code == 2 and not no_serving
    assert_one_line(err, *fragments)


def test_bad_environment_value_names_the_variable(capsys, no_serving, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FERRY_METRICS_PORT", "eighty")
    code, err = run(["serve", str(tmp_path)], capsys)
    assert code == 2 and not no_serving
    assert_one_line(err, "FERRY_METRICS_PORT", "'eighty'")


def test_port_in_use(capsys, no_serving, tmp_path: Path) -> None:
    with socket.socket() as holder:  # hold a port for the whole check
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, err = run(["serve", str(tmp_path), "--http-port", str(port), "--grpc-port", "0"], capsys)
    assert code == 1 and not no_serving
    assert_one_line(err, f"--http-port {port}", "already in use")


def test_two_different_repositories_are_refused(capsys, no_serving, tmp_path: Path) -> None:
    code, err = run(["serve", str(tmp_path), "--model-repository", str(tmp_path / "other")], capsys)
    assert code == 2 and not no_serving
    assert_one_line(err, "two repositories")


def test_repository_may_be_positional(capsys, no_serving, tmp_path: Path) -> None:
    code, err = run(["serve", str(tmp_path), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"], capsys)
    assert code == 0, err
    assert [s.model_repository for s in no_serving] == [tmp_path]


def test_help_shows_defaults_and_variables(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for expected in (
        "REPOSITORY",
        "(default: model_repo; env FERRY_MODEL_REPOSITORY)",
        "(default: 8000; env FERRY_HTTP_PORT)",
        "(default: 8002; env FERRY_METRICS_PORT)",
        "(default: 256 MiB; env FERRY_HTTP_MAX_BODY_BYTES)",
        "(default: none; env FERRY_MODEL_CONTROL_MODE)",
        "(default: on; env FERRY_DASHBOARD)",
    ):
        assert expected in text, expected


def test_missing_extra_is_one_line_with_the_install_command(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    def optimize_needing_tensorrt(args):
        import tensorrt_is_not_installed_here  # noqa: F401 - the import itself is the failure

    monkeypatch.setattr(cli, "_optimize", optimize_needing_tensorrt)
    code, err = run(["optimize", "some_model", "--precision", "fp16"], capsys)
    assert code == 1
    assert_one_line(err, "'tensorrt_is_not_installed_here'", "not installed")
    assert "pip install '.[torch]' in the Ferry checkout" in str(
        missing_extra(ModuleNotFoundError("no torch", name="torch"))
    )
    assert "pip install '.[tensorrt]' in the Ferry checkout" in str(
        missing_extra(ModuleNotFoundError("x", name="tensorrt.plugin"))
    )
