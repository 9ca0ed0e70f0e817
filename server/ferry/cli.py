"""The ``ferry`` command: ``ferry serve`` runs the server, ``ferry optimize`` makes FP16/INT8/TensorRT models."""

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
from .cli_help import describe_defaults
from .errors import FerryError
from .repository.manager import ControlMode
from .settings import Settings


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model repository over REST and gRPC",
        description="Every option can also be set by the FERRY_<OPTION> environment variable.",
    )
    p.add_argument(
        "repository", nargs="?", type=Path, metavar="REPOSITORY", help="model repository (same as --model-repository)"
    )
    p.add_argument("--model-repository", "--model-repo", dest="model_repository", type=Path, metavar="DIR")
    p.add_argument("--host")
    p.add_argument("--http-port", type=int)
    p.add_argument("--grpc-port", type=int)
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--model-control-mode", choices=[m.value for m in ControlMode])
    p.add_argument(
        "--load-model",
        action="append",
        metavar="NAME",
        help="model to load at start in explicit mode (repeatable; '*' loads all)",
    )
    p.add_argument("--repository-poll-secs", type=float)
    p.add_argument("--exit-timeout-secs", "--exit-timeout", dest="exit_timeout_secs", type=float)
    p.add_argument("--http-max-body-bytes", type=int)
    p.add_argument("--grpc-max-message-bytes", type=int)
    p.add_argument(
        "--dashboard",
        action=argparse.BooleanOptionalAction,
        help="serve the web dashboard at / on the REST port (default: on)",
    )
    p.add_argument(
        "--max-inflight-requests",
        type=int,
        help="server-wide cap on requests in flight; more get 503 + Retry-After / UNAVAILABLE",
    )
    p.add_argument("--max-inflight-bytes", type=int, help="server-wide cap on request bytes held at once")
    p.add_argument("--max-tensor-elements", type=int, help="elements per request tensor (before decoding)")
    p.add_argument("--max-bytes-elements", type=int, help="BYTES elements per request tensor")
    p.add_argument("--max-inputs-per-request", type=int, help="input tensors per request")
    p.add_argument("--http-max-json-bytes", type=int, help="JSON part of a REST inference body")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["default", "ISO8601", "json"], help="log line format (json: JSON lines)")
    p.add_argument("--trace-file", metavar="FILE", help="append traced requests' spans to FILE as JSON lines")
    p.add_argument("--trace-otlp-endpoint", metavar="URL", help="export spans over OTLP/HTTP (needs ferry[otlp])")
    p.add_argument(
        "--cache-size",
        type=int,
        metavar="BYTES",
        help="response cache size (Triton's --cache-config local,size=); used by models with response_cache enabled",
    )
    p.add_argument(
        "--intake-processes",
        type=int,
        metavar="N",
        help="processes serving the REST and gRPC ports, handing tensors to the model process through shared "
        "memory (0 = one per four cores; 1 = a single process)",
    )
    p.add_argument("--intake-arena-bytes", type=int, help="shared memory per intake process and direction")
    _limits_arguments(p)
    security = p.add_argument_group("security", "bearer tokens may also come from FERRY_AUTH_TOKENS (comma separated)")
    security.add_argument(
        "--auth-token-file",
        metavar="FILE",
        help="require 'Authorization: Bearer <token>' with a token from FILE (one per line)",
    )
    security.add_argument(
        "--auth-public-health",
        action="store_true",
        default=None,
        help="let health, readiness and model-ready checks through without a token",
    )
    security.add_argument(
        "--auth-metrics", action="store_true", default=None, help="require a token on the metrics port too"
    )
    security.add_argument(
        "--allow-python-models",
        action="store_true",
        default=None,
        help="load Triton Python models (model.py): the repository's code runs in the server (default: refused)",
    )
    security.add_argument("--tls-cert", metavar="PEM", help="serve REST and gRPC over TLS with this certificate")
    security.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    security.add_argument(
        "--tls-client-ca", metavar="PEM", help="require client certificates signed by this CA (mutual TLS)"
    )
    describe_defaults(p)


def _limits_arguments(p: argparse.ArgumentParser) -> None:
    limits = p.add_argument_group("connection limits", "against slow and hostile clients (docs/reliability.md)")
    limits.add_argument("--http-max-connections", type=int, help="open REST connections (0 = no cap)")
    limits.add_argument("--http-header-timeout-secs", type=float, help="time to send the headers")
    limits.add_argument("--http-max-header-bytes", type=int, help="request line and headers")
    limits.add_argument("--http-min-body-rate", type=int, help="slowest body upload in bytes/s (0 = any)")
    limits.add_argument("--http-body-grace-secs", type=float, help="before the body rate counts")
    limits.add_argument("--http-keep-alive-timeout-secs", type=float, help="idle keep-alive connections")
    limits.add_argument("--max-response-bytes", type=int, help="largest inference response")
    limits.add_argument("--grpc-max-concurrent-streams", type=int, help="calls per gRPC connection")
    limits.add_argument("--grpc-max-concurrent-rpcs", type=int, help="unfinished gRPC calls server-wide")
    limits.add_argument("--grpc-min-ping-interval-secs", type=float, help="fastest client keepalive ping")
    limits.add_argument("--grpc-max-ping-strikes", type=int, help="bad pings before GOAWAY")
    limits.add_argument("--grpc-max-metadata-bytes", type=int, help="metadata of one gRPC call")
    limits.add_argument("--grpc-max-connection-idle-secs", type=float, help="idle gRPC connections")
    limits.add_argument("--grpc-max-calls-per-peer", type=int, help="unfinished gRPC calls of one client address")
    limits.add_argument("--grpc-request-timeout-secs", type=float, help="time to send a unary call's request")


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
    p.add_argument("--force", action="store_true", help="write the INT8 model even below --min-agreement")
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
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _optimize(args: argparse.Namespace) -> int:
    from .optimize.run import AccuracyRefused, OptimizeOptions, optimize

    options = OptimizeOptions(
        **{k: v for k, v in vars(args).items() if k not in ("command", "quiet")}, show_progress=not args.quiet
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
    options = {k: v for k, v in vars(args).items() if k not in ("command", "repository") and v is not None}
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


def _main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="ferry", description="Ferry inference server")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _optimize_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "optimize":
        return _optimize(args)
    if args.command == "serve":
        settings = _serve_settings(args)
        from .server import serve

        serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
