#!/usr/bin/env python3
"""Regenerate Ferry's Python protobuf / gRPC modules from the .proto files.

Why this script exists instead of a bare ``protoc`` command line:

* protoc writes absolute imports between generated modules
  (``import model_config_pb2``), which only work when the output folder is on
  ``sys.path``.  The modules live inside the ``ferry_client.protocol``
  package, so those imports are rewritten to package-relative ones.
* protoc registers every file in protobuf's process-wide default descriptor
  pool.  tritonclient registers its own ``grpc_service.proto`` and
  ``model_config.proto`` there, with the same file and message names, and
  Ferry's tests (and users) import both packages in one process; the second
  registration fails with a "duplicate symbol" error.  The generated modules
  are therefore rewritten to register into the private pool defined in the
  hand-written ``ferry_client/protocol/_pool.py``.
* ``--check`` lets CI verify that the committed modules match the .proto
  files and the pinned grpcio-tools version.

Usage::

    python protos/generate.py                 # write into the client package
    python protos/generate.py --out some/dir  # write elsewhere
    python protos/generate.py --check         # exit 1 if committed files are stale

Requires ``grpcio-tools`` (pinned in the ``test`` extra of pyproject.toml, so
that regenerated output is byte-for-byte reproducible).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
DEFAULT_OUT_DIR = REPO_ROOT / "clients" / "python" / "ferry_client" / "protocol"

# Order matters only for readability: protoc resolves the import itself.
PROTO_FILES: tuple[str, ...] = ("model_config.proto", "grpc_service.proto")

# The files this script owns in the output folder.  Anything else there
# (``__init__.py``, ``_pool.py``) is hand-written and left alone.
GENERATED_FILES: tuple[str, ...] = (
    "model_config_pb2.py",
    "model_config_pb2.pyi",
    "grpc_service_pb2.py",
    "grpc_service_pb2.pyi",
    "grpc_service_pb2_grpc.py",
)

# Sibling generated modules whose absolute imports must become relative.
_SIBLING_MODULES: tuple[str, ...] = ("model_config_pb2", "grpc_service_pb2")

_DEFAULT_POOL_CALL = "_descriptor_pool.Default()"
_POOL_IMPORT = "from . import _pool as _ferry_pool"
_POOL_EXPR = "_ferry_pool.POOL"
_IMPORTS_MARKER = "# @@protoc_insertion_point(imports)"


class GenerationError(RuntimeError):
    """protoc failed or its output did not look as expected."""


def _run_protoc(proto_dir: Path, out_dir: Path) -> None:
    """Run the protoc bundled with grpcio-tools on PROTO_FILES."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise GenerationError(
            "grpcio-tools is not installed; install the 'test' extra (pip install -e '.[test]')"
        ) from exc

    well_known_protos = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={well_known_protos}",
        f"--proto_path={proto_dir}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(proto_dir / name) for name in PROTO_FILES),
    ]
    status = protoc.main(args)
    if status != 0:
        raise GenerationError(f"protoc exited with status {status}")


def _relative_imports(text: str) -> str:
    """Turn ``import X_pb2 as alias`` for sibling modules into ``from . import``."""
    for module in _SIBLING_MODULES:
        text = re.sub(
            rf"^import {module} as (\w+)$",
            rf"from . import {module} as \1",
            text,
            flags=re.MULTILINE,
        )
    return text


def _use_private_pool(text: str, filename: str) -> str:
    """Make a ``*_pb2.py`` module register its file in Ferry's private pool."""
    if text.count(_DEFAULT_POOL_CALL) != 1 or text.count(_IMPORTS_MARKER) != 1:
        raise GenerationError(
            f"{filename}: unexpected protoc output layout; update protos/generate.py for this grpcio-tools version"
        )
    text = text.replace(_IMPORTS_MARKER, f"{_IMPORTS_MARKER}\n{_POOL_IMPORT}")
    return text.replace(_DEFAULT_POOL_CALL, _POOL_EXPR)


def _postprocess(filename: str, text: str) -> str:
    text = _relative_imports(text)
    if filename.endswith("_pb2.py"):
        text = _use_private_pool(text, filename)
    return text


def render(proto_dir: Path = PROTO_DIR) -> dict[str, str]:
    """Generate and post-process the modules; return ``{file name: contents}``."""
    with tempfile.TemporaryDirectory(prefix="ferry-protoc-") as tmp:
        raw_dir = Path(tmp)
        _run_protoc(proto_dir, raw_dir)
        rendered: dict[str, str] = {}
        for name in GENERATED_FILES:
            path = raw_dir / name
            if not path.is_file():
                raise GenerationError(f"protoc did not produce {name}")
            rendered[name] = _postprocess(name, path.read_text(encoding="utf-8"))
    return rendered


def generate(out_dir: Path = DEFAULT_OUT_DIR, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Write the generated modules into ``out_dir`` and return their paths.

    ``out_dir`` must already exist.  Only the files in GENERATED_FILES are
    written; hand-written modules in the same folder are not touched.
    """
    if not out_dir.is_dir():
        raise GenerationError(f"output directory {out_dir} does not exist")
    written: list[Path] = []
    for name, text in render(proto_dir).items():
        target = out_dir / name
        # newline="\n" keeps the output identical on every platform.
        with target.open("w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        written.append(target)
    return written


def check(out_dir: Path = DEFAULT_OUT_DIR, proto_dir: Path = PROTO_DIR) -> list[str]:
    """Compare freshly generated output with the files in ``out_dir``.

    Returns one human-readable line per stale or missing file (empty when
    everything is up to date).
    """
    problems: list[str] = []
    for name, expected in render(proto_dir).items():
        target = out_dir / name
        if not target.is_file():
            problems.append(f"{name}: missing")
            continue
        actual = target.read_text(encoding="utf-8")
        if actual == expected:
            continue
        diff = list(
            difflib.unified_diff(
                actual.splitlines(),
                expected.splitlines(),
                fromfile=f"committed/{name}",
                tofile=f"generated/{name}",
                lineterm="",
                n=0,
            )
        )
        changed = sum(1 for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---")))
        preview = "\n    ".join(line[:160] for line in diff[:12])
        problems.append(f"{name}: differs ({changed} changed lines)\n    {preview}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"output directory (default: {DEFAULT_OUT_DIR.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--proto-dir",
        type=Path,
        default=PROTO_DIR,
        help="directory holding the .proto files (default: this script's directory)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write anything; exit 1 if the files in --out are out of date",
    )
    args = parser.parse_args(argv)

    try:
        if args.check:
            problems = check(args.out, args.proto_dir)
            if problems:
                print("Generated protocol modules are out of date:", file=sys.stderr)
                for problem in problems:
                    print(f"  {problem}", file=sys.stderr)
                print("Run: python protos/generate.py", file=sys.stderr)
                return 1
            print("Generated protocol modules are up to date.")
            return 0
        for path in generate(args.out, args.proto_dir):
            print(f"wrote {path}")
        return 0
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
