"""Command line of ``ferry-client perf``: options named like perf_analyzer's where they overlap."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import FerryClientError
from .extra import PERF_INSTALL_HINT
from .inputs import (
    datatype_overrides,
    file_samples,
    image_samples,
    model_inputs,
    parse_shapes,
    random_samples,
)
from .ranges import parse_range
from .report import client_limit_note, table, write_csv, write_json, write_plot
from .runner import StepPlan, StepResult, WorkerPool, default_processes, progress_printer, run_step
from .wire import GRPC_ENGINES, Security, default_grpc_engine, encode_requests, fast_http_available
from .worker import WorkerConfig

# Defaults sized so a 3-step sweep on an idle server takes about 15 s (three 1.5 s windows per step
# when they agree) and about 25 s when they never do; perf_analyzer's 5 s windows took over a minute.
DEFAULT_WINDOW_MS = 1500
DEFAULT_MAX_TRIALS = 5
DEFAULT_WARMUP_S = 0.5


def add_perf_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", required=True, help="model name")
    p.add_argument("-x", "--model-version", default="", help="model version (default: the server's choice)")
    p.add_argument("-u", "--url", default=None, help="server address (default 127.0.0.1:8000 http, :8001 grpc)")
    p.add_argument("-i", "--protocol", choices=["http", "grpc"], default="http")
    p.add_argument(
        "--grpc-engine",
        choices=GRPC_ENGINES,
        default=None,
        help="gRPC load through pre-built HTTP/2 frames ('raw', a third of grpcio's CPU per call; needs the "
        "perf extra) or grpcio's asyncio channel (default: raw when installed)",
    )
    p.add_argument("-b", "--batch-size", type=int, default=1, help="items per request (batching models)")
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="closed loop: requests kept in flight, e.g. 1:32:x2 (doubling; default 1)",
    )
    load.add_argument(
        "--request-rate-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="open loop: requests per second, e.g. 100:800:x2",
    )
    p.add_argument(
        "--request-distribution",
        choices=["poisson", "constant"],
        default="poisson",
        help="arrivals in open loop (default poisson)",
    )
    p.add_argument(
        "--measurement-interval",
        "-p",
        type=int,
        default=DEFAULT_WINDOW_MS,
        metavar="MS",
        help=f"length of one measurement window (default {DEFAULT_WINDOW_MS})",
    )
    p.add_argument(
        "--stability-percentage",
        "-s",
        type=float,
        default=10.0,
        help="last 3 windows within this %% of their mean ends a step (default 10)",
    )
    p.add_argument(
        "--max-trials",
        "-r",
        type=int,
        default=DEFAULT_MAX_TRIALS,
        help=f"windows at most per step (default {DEFAULT_MAX_TRIALS})",
    )
    p.add_argument(
        "--time-limit", type=float, default=120.0, metavar="S", help="seconds at most per step (default 120)"
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=DEFAULT_WARMUP_S,
        metavar="S",
        help=f"seconds of load before measuring (default {DEFAULT_WARMUP_S})",
    )
    p.add_argument(
        "--input-data",
        default="random",
        help="'random', a .npy/.npz/.json file (perf_analyzer's JSON format), or a folder of images",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="shape of a variable-size input, without the batch dimension (repeatable)",
    )
    p.add_argument("--image-input", default=None, help="input that takes the images of --input-data DIR")
    p.add_argument(
        "--processes",
        type=int,
        default=0,
        help="worker processes generating load (default: about one per 4 in flight, up to the cores)",
    )
    p.add_argument("--max-outstanding", type=int, default=1024, help="open loop: requests in flight at most")
    p.add_argument("--no-server-stats", action="store_true", help="don't read the statistics extension")
    p.add_argument("-H", "--header", action="append", default=[], metavar="NAME:VALUE", help="extra header")
    p.add_argument("--bearer-token", default=None, help="send 'Authorization: Bearer TOKEN'")
    p.add_argument("--ssl", action="store_true", help="TLS (https / secure gRPC channel)")
    p.add_argument("--root-certificates", default=None, metavar="PEM", help="CA bundle to verify the server")
    p.add_argument("--certificate-chain", default=None, metavar="PEM", help="client certificate (mTLS)")
    p.add_argument("--private-key", default=None, metavar="PEM", help="client key (mTLS)")
    p.add_argument("-f", "--csv", type=Path, default=None, help="write the steps as CSV")
    p.add_argument("--json", type=Path, default=None, help="write steps, windows and server stats as JSON")
    p.add_argument("--plot", type=Path, default=None, help="write a latency-vs-throughput PNG (needs matplotlib)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _security(args: argparse.Namespace) -> Security:
    headers = {}
    for item in args.header:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header '{item}': expected NAME:VALUE")
        headers[name.strip()] = value.strip()
    if args.bearer_token:
        headers["Authorization"] = f"Bearer {args.bearer_token}"
    return Security(
        ssl=args.ssl,
        root_certificates=args.root_certificates,
        certificate_chain=args.certificate_chain,
        private_key=args.private_key,
        headers=headers,
    )


def check_before_measuring(args: argparse.Namespace) -> None:
    """Everything that would fail only after the measurement (a missing extra, an output folder that does
    not exist, impossible numbers) fails now, before any load is sent."""
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise ValueError(f"--plot needs matplotlib, which is not installed ({PERF_INSTALL_HINT})")
    for flag, path in (("--csv", args.csv), ("--json", args.json), ("--plot", args.plot)):
        if path is not None and not path.parent.is_dir():
            raise ValueError(f"{flag} {path}: folder '{path.parent}' does not exist")
    if args.grpc_engine == "raw" and importlib.util.find_spec("hpack") is None:
        raise ValueError(f"--grpc-engine raw needs hpack, which is not installed ({PERF_INSTALL_HINT})")
    if args.measurement_interval <= 0:
        raise ValueError("--measurement-interval must be > 0 ms")
    if args.max_trials < 1:
        raise ValueError("--max-trials must be >= 1")
    if args.warmup < 0 or args.time_limit <= 0:
        raise ValueError("--warmup must be >= 0 s and --time-limit > 0 s")


def _admin_client(protocol: str, url: str, security: Security) -> Any:
    """A plain SDK client for metadata, config and statistics."""
    if protocol == "grpc":
        from ..grpc import GrpcClient

        return GrpcClient(
            url,
            headers=security.headers,
            ssl=security.ssl,
            root_certificates=security.file_bytes(security.root_certificates),
            private_key=security.file_bytes(security.private_key),
            certificate_chain=security.file_bytes(security.certificate_chain),
        )
    from ..http import HttpClient

    return HttpClient(url, headers=security.headers, ssl_context=security.ssl_context())


def _url(args: argparse.Namespace) -> str:
    return args.url or ("127.0.0.1:8001" if args.protocol == "grpc" else "127.0.0.1:8000")


def run_perf(args: argparse.Namespace) -> int:
    """Measure, print the table, write the requested files; 0 when every step had no failures.

    A server that cannot be reached or does not know the model is one line and exit code 1."""
    try:
        return _run_perf(args)
    except FerryClientError as exc:
        print(f"ferry-client perf: {_url(args)}: {exc}", file=sys.stderr)
        return 1


def _run_perf(args: argparse.Namespace) -> int:
    show = progress_printer() if not args.quiet else (lambda line: None)
    try:
        security = _security(args)
        mode = "rate" if args.request_rate_range else "concurrency"
        values = (
            parse_range(args.request_rate_range, "--request-rate-range", integer=False)
            if mode == "rate"
            else parse_range(args.concurrency_range or "1", "--concurrency-range")
        )
        shapes = parse_shapes(args.shape)
        if args.batch_size < 1:
            raise ValueError("--batch-size must be >= 1")
        check_before_measuring(args)
    except ValueError as exc:
        print(f"ferry-client perf: {exc}", file=sys.stderr)
        return 2
    url = _url(args)
    with _admin_client(args.protocol, url, security) as admin:
        metadata = admin.model_metadata(args.model, args.model_version)
        config = admin.model_config(args.model, args.model_version)
        specs, batched = model_inputs(metadata, config)
        if not batched and args.batch_size != 1:
            print(
                f"ferry-client perf: model '{args.model}' does not batch (max_batch_size 0); use -b 1", file=sys.stderr
            )
            return 2
        source = Path(args.input_data) if args.input_data != "random" else None
        try:
            if source is None:
                samples = random_samples(specs, batched, args.batch_size, shapes)
            elif source.is_dir():
                samples = image_samples(source, specs, batched, args.batch_size, args.image_input)
            else:
                samples = file_samples(source, specs, batched, args.batch_size, shapes)
        except (ValueError, OSError) as exc:
            print(f"ferry-client perf: {exc}", file=sys.stderr)
            return 2
        requests = encode_requests(
            args.protocol, args.model, args.model_version, samples, datatype_overrides(samples, specs)
        )
        processes = args.processes or default_processes(max(values), mode)
        statistics = None
        if not args.no_server_stats:
            from .server_stats import totals

            def statistics() -> dict[str, int]:
                return totals(admin.model_statistics(args.model, args.model_version), args.model, args.model_version)

        plan = StepPlan(
            window_s=args.measurement_interval / 1000,
            warmup_s=args.warmup,
            stability=args.stability_percentage / 100,
            max_windows=args.max_trials,
            time_limit_s=args.time_limit,
            distribution=args.request_distribution,
            max_outstanding=args.max_outstanding,
        )
        if args.protocol == "http" and not fast_http_available():
            show(
                "note: neither httptools nor aiohttp is installed; HTTP load goes through httpx, which caps "
                f"the rate a process can offer ({PERF_INSTALL_HINT})"
            )
        grpc_engine = args.grpc_engine or default_grpc_engine()
        if args.protocol == "grpc" and grpc_engine == "grpcio" and args.grpc_engine is None:
            show(
                "note: hpack is not installed; gRPC load goes through grpcio, whose client CPU per call (~3x the "
                f"raw engine's) is taken from a server on the same machine ({PERF_INSTALL_HINT})"
            )
        over = f"grpc ({grpc_engine} engine)" if args.protocol == "grpc" else args.protocol
        show(
            f"ferry-client perf: model '{args.model}' over {over} at {url}, batch {args.batch_size}, "
            f"{len(requests)} distinct request(s), {processes} worker process(es)"
        )
        worker_config = WorkerConfig(
            args.protocol,
            url,
            args.model,
            args.model_version,
            requests,
            security,
            connections=int(max(values)) if mode == "concurrency" else args.max_outstanding,
            grpc_engine=grpc_engine,
        )
        steps: list[StepResult] = []
        with WorkerPool(worker_config, processes) as pool:
            for seed, value in enumerate(values):
                steps.append(run_step(pool, mode, value, plan, seed, statistics, show))
                last = steps[-1]
                if last.client_limited:
                    show(f"  warning: a worker used {last.client_cpu:.0%} of a core; the tool was the limit")
                if last.server is not None and last.server.requests != last.client_requests:
                    show(
                        f"  note: the server counted {last.server.requests} successful requests, the tool "
                        f"{last.client_requests} (other clients active?)"
                    )
    print(table(steps))
    note = client_limit_note(steps)
    if note is not None:
        print(note)
    meta = {
        "model": args.model,
        "version": args.model_version,
        "protocol": args.protocol,
        "grpc_engine": grpc_engine if args.protocol == "grpc" else None,
        "url": url,
        "batch_size": args.batch_size,
        "processes": processes,
        "input_data": args.input_data,
        "window_s": plan.window_s,
        "stability": plan.stability,
    }
    if args.csv:
        write_csv(args.csv, steps)
    if args.json:
        write_json(args.json, steps, meta)
    if args.plot:
        write_plot(args.plot, steps, f"{args.model} over {args.protocol}, batch {args.batch_size}")
    for step in steps:
        for text, count in step.failures.items():
            print(f"{step.mode} {step.value:g}: {count} x {text}", file=sys.stderr)
    return 1 if any(step.client_failures for step in steps) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry-client perf", description=__doc__)
    add_perf_arguments(parser)
    return run_perf(parser.parse_args(argv))
