"""Token parsing and checking, the public/private split, TLS option checks, path containment, and a scan
proving the server source never unpickles or executes anything."""

from __future__ import annotations

import ast
import hmac
import os
from pathlib import Path

import pytest

from ferry.errors import InvalidArgument, ModelLoadError
from ferry.paths import check_model_name, inside, model_directory
from ferry.security import tokens as tokens_module
from ferry.security.policy import INVALID_TOKEN, MISSING_TOKEN, AuthPolicy
from ferry.security.tls import TlsConfigError, TlsFiles
from ferry.security.tokens import TokenError, TokenStore, bearer_token, parse_tokens

SERVER_SOURCE = Path(__file__).resolve().parents[2] / "server" / "ferry"


# --- tokens ---------------------------------------------------------------------------------------


def test_parse_tokens_allows_comments_blank_lines_and_separators() -> None:
    text = "# header\n\nalpha\nbeta, gamma  # trailing comment\n  delta=\n"
    assert parse_tokens(text, "f") == ["alpha", "beta", "gamma", "delta="]


@pytest.mark.parametrize("bad", ['quo"te', "semi;colon", "ünï", "a=b", "tab\x00nul"])
def test_parse_tokens_rejects_what_a_bearer_header_cannot_carry(bad: str) -> None:
    with pytest.raises(TokenError, match="f:2"):
        parse_tokens(f"fine\n{bad}\n", "f")


def test_store_from_file_and_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("from-file\n")
    store = TokenStore.from_options(token_file, "from-env,other")
    assert store is not None
    assert store.check("from-file") and store.check(b"from-env") and store.check("other")
    assert not store.check("from-fil") and not store.check("") and not store.check("from-file ")
    assert TokenStore.from_options(None, None) is None and TokenStore.from_options(None, "") is None


def test_store_without_tokens_refuses_to_start(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(TokenError, match="holds no token"):
        TokenStore.from_options(empty, None)
    with pytest.raises(TokenError, match="cannot read"):
        TokenStore.from_options(tmp_path / "missing", None)


def test_check_compares_against_every_token_without_stopping(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(True)
        return real(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", counting)
    store = TokenStore([f"token-{i}" for i in range(5)])
    for presented in ("token-0", "token-4", "nope"):
        calls.clear()
        store.check(presented)
        assert len(calls) == 5, presented


def test_token_file_rotation_and_a_broken_file_keeps_the_last_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens_module, "_RECHECK_SECONDS", 0.0)
    token_file = tmp_path / "tokens"
    token_file.write_text("first\n")
    store = TokenStore(token_file=token_file)
    assert store.check("first")
    token_file.write_text("second\n")
    os.utime(token_file, ns=(1, 1))  # a different mtime even on coarse clocks
    assert store.check("second") and not store.check("first")
    token_file.write_text('bad"token\n')
    os.utime(token_file, ns=(2, 2))
    assert store.check("second"), "a malformed rewrite must not drop (or open) auth"
    token_file.unlink()
    assert store.check("second") and not store.check("bad")


@pytest.mark.parametrize(
    "header, token",
    [
        ("Bearer abc", b"abc"),
        ("bearer abc", b"abc"),
        ("BEARER  abc ", b"abc"),
        (b"Bearer abc", b"abc"),
        ("Basic abc", None),
        ("abc", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("", None),
        (None, None),
        ("Bearer ü", "ü".encode()),
    ],
)
def test_bearer_token_parsing(header: str | bytes | None, token: bytes | None) -> None:
    assert bearer_token(header) == token


def test_policy_public_paths_only_when_asked() -> None:
    store = TokenStore(["t"])
    public = AuthPolicy(store, public_health=True)
    private = AuthPolicy(store)
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/m/ready", "/v2/models/m/versions/3/ready"):
        assert public.http_public(path) and not private.http_public(path)
    for path in (
        "/v2",
        "/v2/models/m",
        "/v2/models/m/infer",
        "/v2/health/live/x",
        "/v2/models/a/b/ready",
        "/v2/repository/index",
        "/metrics",
        "/openapi.json",
        "/docs",
    ):
        assert not public.http_public(path), path
    for method in ("ServerLive", "ServerReady", "ModelReady"):
        assert public.grpc_public(f"/inference.GRPCInferenceService/{method}")
        assert not private.grpc_public(f"/inference.GRPCInferenceService/{method}")
    for method in ("ModelInfer", "ModelStreamInfer", "RepositoryModelLoad", "ServerMetadata"):
        assert not public.grpc_public(f"/inference.GRPCInferenceService/{method}")
    assert public.denial(None) == MISSING_TOKEN
    assert public.denial("Bearer x") == INVALID_TOKEN
    assert public.denial("Bearer t") is None


# --- TLS options ----------------------------------------------------------------------------------


def test_tls_options_must_fit_together(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("not a certificate")
    assert TlsFiles.from_options(None, None, None) is None
    with pytest.raises(TlsConfigError, match="needs both"):
        TlsFiles.from_options(pem, None, None)
    with pytest.raises(TlsConfigError, match="needs --tls-cert"):
        TlsFiles.from_options(None, None, pem)
    with pytest.raises(TlsConfigError, match="does not exist"):
        TlsFiles.from_options(pem, tmp_path / "missing", None)
    with pytest.raises(TlsConfigError, match="cannot load"):
        TlsFiles.from_options(pem, pem, None)


# --- model names and paths ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "../x", "a\\b", "nul\x00", "/etc", "..\\x"])
def test_invalid_model_names(name: str) -> None:
    with pytest.raises(InvalidArgument, match="invalid model name"):
        check_model_name(name)


@pytest.mark.parametrize("name", ["simple", "resnet-50", "a.b", "model_1", "名前", "a..b"])
def test_valid_model_names(name: str) -> None:
    assert check_model_name(name) == name


def test_inside_follows_symlinks_and_refuses_escapes(tmp_path: Path) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "model" / "1").mkdir(parents=True)
    outside.mkdir()
    (repo / "alias").symlink_to("model")
    (repo / "away").symlink_to(outside)
    (repo / "model" / "link").symlink_to(outside / "file")
    assert model_directory(repo, "alias") == (repo / "model").resolve()
    assert inside(repo / "model", "1/model.onnx", "f") == (repo / "model" / "1" / "model.onnx").resolve()
    for relative in ("../outside/file", "1/../../..", "link"):
        with pytest.raises(ModelLoadError, match="outside"):
            inside(repo / "model", relative, "f")
    with pytest.raises(ModelLoadError, match="not an absolute path"):
        inside(repo / "model", str(outside / "file"), "f")
    with pytest.raises(ModelLoadError, match="outside"):
        model_directory(repo, "away")


# --- nothing is unpickled or executed -------------------------------------------------------------

#: Calls that deserialise code-bearing formats or run code; none may appear in the server.
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve", "runpy"}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: The PyTorch backend and the GPU pre-processing may import torch, and load models with torch.jit.load only:
#: torch.load, torch.serialization and torch.package unpickle.
TORCH_MODULES = {
    "pytorch.py",
    "torch_loading.py",
    "cuda_graphs.py",
    "device_preprocess.py",
    "runtime.py",
    "host_buffers.py",
    "device_tensors.py",
    "device_decode.py",
    "cuda_ipc.py",
}
FORBIDDEN_TORCH = {"torch.serialization", "torch.package"}
# The one module that imports repository code: Triton Python models, reached only with
# --allow-python-models (tests/integration/test_python_models.py checks the refusal without it).
PYTHON_MODEL_IMPORTER = SERVER_SOURCE / "backends" / "python_backend" / "runner.py"


def _pickle_refused(call: ast.Call) -> bool:
    """``np.load(..., allow_pickle=False)`` reads plain arrays only, so it may stay."""
    return any(
        k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords
    )


FORBIDDEN_METHODS = {"import_module", "load_source", "exec_module", "run_path", "run_module", "spec_from_file_location"}


def test_server_source_never_unpickles_or_executes() -> None:
    offences = []
    for path in sorted(SERVER_SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] + (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                )
                offences += [
                    f"{path.name}:{node.lineno} imports {n}"
                    for n in names
                    if n.split(".")[0] in FORBIDDEN_MODULES
                    or n in FORBIDDEN_TORCH
                    or (n.split(".")[0] == "torch" and path.name not in TORCH_MODULES)
                ]
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
                    offences.append(f"{path.name}:{node.lineno} calls {func.id}")
                elif isinstance(func, ast.Attribute) and (
                    (func.attr in FORBIDDEN_METHODS and path != PYTHON_MODEL_IMPORTER)
                    or (
                        func.attr == "load"
                        and isinstance(func.value, ast.Name)
                        and func.value.id in ("np", "numpy", "yaml", "torch")
                        and not _pickle_refused(node)
                    )
                ):
                    offences.append(f"{path.name}:{node.lineno} calls {func.attr}")
    assert offences == []
