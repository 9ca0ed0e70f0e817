"""Build-time check of an image's Python environment; exits non-zero with the reasons.

The GPU images install ``onnxruntime-gpu`` (or NVIDIA's Jetson build) instead of the CPU
``onnxruntime`` wheel. Both install the same ``onnxruntime`` package, so the CPU wheel sneaking in
through a dependency would silently replace the GPU build. This check fails the image build instead.

    python check_image.py --dist onnxruntime-gpu --no-dist onnxruntime --provider CUDAExecutionProvider \
        --module ferry.backends.tensorrt --module cuda.bindings.runtime --present tensorrt

Every backend module the image claims is imported (``--module``), so a missing dependency fails the
build instead of the first model load; ``--present`` only finds a module without importing it, for
the few whose import needs the device's driver libraries (which a build does not have).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import importlib.util
import sys
from collections.abc import Sequence


def problems(
    dists: Sequence[str],
    absent: Sequence[str],
    providers: Sequence[str],
    modules: Sequence[str],
    import_checks: bool = True,
    present: Sequence[str] = (),
) -> list[str]:
    found: list[str] = []
    for module in present:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:  # a parent package that does not import
            found.append(f"module {module} cannot be found: {exc}")
            continue
        if spec is None:
            found.append(f"module {module} is not installed")
    for name in dists:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found.append(f"distribution {name} is not installed")
    for name in absent:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found.append(f"distribution {name} {dist.version} is installed and must not be")
    if not import_checks:
        return found
    for module in ("ferry", *modules):
        try:
            importlib.import_module(module)
        except Exception as exc:  # report every failure, whatever it is
            found.append(f"import {module} failed: {exc}")
    if providers:
        try:
            import onnxruntime

            available = onnxruntime.get_available_providers()
        except Exception as exc:
            return [*found, f"import onnxruntime failed: {exc}"]
        found.extend(f"onnxruntime lacks {p} (has {', '.join(available)})" for p in providers if p not in available)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", action="append", default=[], help="distribution that must be installed")
    parser.add_argument("--no-dist", action="append", default=[], help="distribution that must not be installed")
    parser.add_argument("--provider", action="append", default=[], help="onnxruntime provider that must exist")
    parser.add_argument("--module", action="append", default=[], help="module that must import")
    parser.add_argument(
        "--present",
        action="append",
        default=[],
        help="module that must be installed but is not imported (its import needs the device)",
    )
    parser.add_argument(
        "--no-import",
        action="store_true",
        help="check distributions only (for cross-builds whose libraries cannot load)",
    )
    args = parser.parse_args(argv)
    found = problems(args.dist, args.no_dist, args.provider, args.module, not args.no_import, args.present)
    for problem in found:
        print(f"check_image: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
