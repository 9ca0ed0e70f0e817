"""The ``ferry-client`` command: ``ferry-client perf`` measures a server (more subcommands may follow)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry-client", description="Ferry client tools")
    sub = parser.add_subparsers(dest="command", required=True)
    from .perf.cli import add_perf_arguments, run_perf

    perf = sub.add_parser(
        "perf",
        help="measure throughput and latency of a model (perf_analyzer-like)",
        description="Load generator for KServe V2 / Triton servers: concurrency sweeps or "
        "Poisson request rates, windows repeated until stable, server-side breakdown.",
    )
    add_perf_arguments(perf)
    args = parser.parse_args(argv)
    return run_perf(args)


if __name__ == "__main__":
    sys.exit(main())
