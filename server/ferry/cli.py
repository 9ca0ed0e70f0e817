"""The ``ferry`` command: ``ferry serve`` runs the server, ``ferry optimize`` makes FP16/INT8/TensorRT models,
``ferry tune`` recommends a serving config."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from . import __version__
from .cli_errors import (
    EXIT_USAGE,
    OneLineArgumentParser,
    UserError,
    check_ports_free,
    check_repository,
    fail,
    missing_extra,
    settings_error,
)
from .cli_settings import add_settings_flags, flag_options
from .errors import FerryError
from .settings import Settings
from .tune.arguments import add_tune_parser


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model repository over REST and gRPC",
        description="Every option can also be set by the FERRY_<OPTION> environment variable.",
    )
    p.add_argument(
        "repository", nargs="?", type=Path, metavar="REPOSITORY", help="model repository (same as --model-repository)"
    )
    add_settings_flags(p)


def _optimize_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize",
        help="write an FP16 / INT8 ONNX model or a TensorRT engine of a model, checked against FP32",
        description="Writes <model>_<precision> (or --output-name) next to MODEL_DIR, or a new version with "
        "--as-version, and reports its accuracy against the FP32 model.",
    )
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR", help="the model's directory in a repository")
    p.add_argument("--precision", required=True, choices=["fp16", "int8"])
    p.add_argument(
        "--engine",
        default="onnxruntime",
        choices=["onnxruntime", "tensorrt"],
        help="onnxruntime: an ONNX model (default); tensorrt: a model.plan engine for this GPU",
    )
    p.add_argument("--version", type=int, help="source version (default: the latest)")
    p.add_argument("--output-name", help="name of the new model (default: <model>_<precision>)")
    p.add_argument("--as-version", type=int, metavar="N", help="write version N of the source model instead")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output model")
    p.add_argument(
        "--calibration-images",
        type=Path,
        metavar="DIR",
        help="images (JPEG, PNG, WebP, BMP; searched recursively) run through the model's ferry_image "
        "pipeline to calibrate INT8",
    )
    p.add_argument(
        "--calibration-tensors",
        type=Path,
        metavar="FILE.npy",
        help="ready input tensors [N, ...] for models without ferry_image",
    )
    p.add_argument("--calibration-count", type=int, default=512, help="images used to calibrate (512)")
    p.add_argument("--calibration-method", default="minmax", choices=["minmax", "entropy", "percentile"])
    p.add_argument(
        "--eval-images",
        type=Path,
        metavar="DIR",
        help="images to compare the models on (default: the calibration images)",
    )
    p.add_argument("--eval-count", type=int, default=512, help="images compared (512)")
    p.add_argument(
        "--eval-annotations",
        type=Path,
        metavar="FILE.json",
        help='detectors: ground truth {"image name": [[x1, y1, x2, y2, class], ...]} for the mAP delta',
    )
    p.add_argument(
        "--min-agreement",
        type=float,
        help="refuse INT8 below this top-1 agreement (classifiers, 0.98) or mAP@0.5 against the FP32 "
        "detections (detectors, 0.90)",
    )
    p.add_argument(
        "--min-compared",
        type=int,
        help="refuse to judge INT8 (and so to write it) on fewer inputs compared than this, or for "
        "detectors fewer FP32 detections (50)",
    )
    p.add_argument(
        "--force", action="store_true", help="write the INT8 model even below --min-agreement or --min-compared"
    )
    p.add_argument("--batch-size", type=int, default=16, help="calibration and comparison batch (16)")
    p.add_argument(
        "--int8-scheme",
        default="auto",
        choices=["auto", "u8s8", "s8s8"],
        help="activation/weight types (auto: from the CPU's VNNI support; TensorRT: s8s8)",
    )
    p.add_argument(
        "--reduce-range",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="7-bit weights (auto: on x86 CPUs without VNNI)",
    )
    p.add_argument("--fp16-io", action="store_true", help="FP16 inputs and outputs too (default: kept FP32)")
    p.add_argument("--gpu", type=int, default=0, dest="device_id", help="GPU to build the TensorRT engine on")
    p.add_argument("--workspace-bytes", type=int, help="TensorRT builder workspace limit")
    p.add_argument(
        "--quantize-output-heads",
        action="store_true",
        dest="quantize_outputs",
        help="INT8: quantize the output heads too (default: kept in float, as outputs often mix value ranges)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _optimize(args: argparse.Namespace) -> int:
    from .optimize.run import AccuracyRefused, OptimizeOptions, optimize

    options = OptimizeOptions(
        **{k: v for k, v in vars(args).items() if k not in ("command", "quiet") and v is not None},
        show_progress=not args.quiet,
    )
    try:
        result = optimize(options, say=lambda line: print(line, file=sys.stderr))
    except AccuracyRefused as exc:
        print("\n".join(exc.report.lines()), file=sys.stderr)
        print(f"ferry optimize: {exc}", file=sys.stderr)
        return 2
    except FerryError as exc:  # OptimizeError and load errors of either model
        print(f"ferry optimize: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.model_file} (model '{result.model_dir.name}', version {result.version})")
    for line in [*result.notes, *result.report.lines()]:
        print(f"  {line}")
    return 0


def _serve_settings(args: argparse.Namespace) -> Settings:
    """Settings from flags and environment, checked for what can be checked before anything starts."""
    options = flag_options(args)
    if args.repository is not None:
        if args.model_repository is not None and args.model_repository != args.repository:
            raise UserError(
                f"two repositories given: '{args.repository}' and --model-repository '{args.model_repository}'",
                EXIT_USAGE,
            )
        options["model_repository"] = args.repository
    try:
        settings = Settings(**options)
    except ValidationError as exc:
        raise settings_error(exc) from None
    check_repository(settings.model_repository)
    check_ports_free(
        settings.host,
        {"--http-port": settings.http_port, "--grpc-port": settings.grpc_port, "--metrics-port": settings.metrics_port},
    )
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; a user mistake is one line on stderr and a non-zero exit, never a traceback."""
    try:
        return _main(argv)
    except UserError as exc:
        return fail("ferry", exc)
    except ModuleNotFoundError as exc:
        return fail("ferry", missing_extra(exc))


def build_parser() -> argparse.ArgumentParser:
    """``ferry`` and its subcommands (``serve``'s flags come from ``Settings``; ``optimize`` has its own,
    because its options describe one conversion, not the server)."""
    parser = OneLineArgumentParser(prog="ferry", description="Ferry inference server")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _optimize_parser(sub)
    add_tune_parser(sub)
    return parser


def _main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "tune":
        from .tune.command import run_tune

        return run_tune(args)
    if args.command == "optimize":
        return _optimize(args)
    if args.command == "serve":
        settings = _serve_settings(args)
        from .server import serve

        serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
