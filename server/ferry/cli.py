"""The ``ferry`` command: ``ferry serve`` runs the server (more subcommands join it later)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from . import __version__
from .repository.manager import ControlMode
from .settings import Settings


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model repository over REST and gRPC",
                       description="Every option can also be set by the FERRY_<OPTION> environment variable.")
    p.add_argument("--model-repository", "--model-repo", dest="model_repository", metavar="DIR")
    p.add_argument("--host")
    p.add_argument("--http-port", type=int)
    p.add_argument("--grpc-port", type=int)
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--model-control-mode", choices=[m.value for m in ControlMode])
    p.add_argument("--load-model", action="append", metavar="NAME",
                   help="model to load at start in explicit mode (repeatable; '*' loads all)")
    p.add_argument("--repository-poll-secs", type=float)
    p.add_argument("--exit-timeout-secs", "--exit-timeout", dest="exit_timeout_secs", type=float)
    p.add_argument("--http-max-body-bytes", type=int)
    p.add_argument("--grpc-max-message-bytes", type=int)
    p.add_argument("--max-inflight-requests", type=int,
                   help="server-wide cap on requests in flight; more get 503 + Retry-After / UNAVAILABLE")
    p.add_argument("--max-inflight-bytes", type=int, help="server-wide cap on request bytes held at once")
    p.add_argument("--max-tensor-elements", type=int, help="elements per request tensor (before decoding)")
    p.add_argument("--max-bytes-elements", type=int, help="BYTES elements per request tensor")
    p.add_argument("--max-inputs-per-request", type=int, help="input tensors per request")
    p.add_argument("--http-max-json-bytes", type=int, help="JSON part of a REST inference body")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry", description="Ferry inference server")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        options = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
        try:
            settings = Settings(**options)
        except ValidationError as exc:
            parser.error(str(exc))
        from .server import serve

        serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
