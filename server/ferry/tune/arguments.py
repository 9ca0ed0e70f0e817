"""The options of ``ferry tune`` (kept apart from the run so ``ferry --help`` imports nothing heavy)."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_BUDGET_S = 180.0


def add_tune_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="measure serving configs of a model on this machine and write the best as config.tuned.pbtxt",
        description="Starts a server on loopback over a private copy of the model, measures candidate configs "
        "(batch size, queue delay, instances, threads, precision) with ferry-client perf's engine, and writes "
        "the winner next to config.pbtxt (config.pbtxt itself only with --write).",
    )
    p.add_argument("model_dir", nargs="?", type=Path, metavar="MODEL_DIR", help="the model's directory")
    p.add_argument("--repository", type=Path, metavar="DIR", help="model repository (with -m NAME)")
    p.add_argument("-m", "--model", metavar="NAME", help="model name in --repository")
    p.add_argument(
        "--time-budget", type=float, default=DEFAULT_BUDGET_S, metavar="S", help="seconds for the whole run (180)"
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", default=None, metavar="N[,N...]", help="closed loop: requests in flight (1,8)")
    load.add_argument("--request-rate", default=None, metavar="R[,R...]", help="open loop: requests per second")
    p.add_argument("--latency-budget", metavar="pXX=VALUE", help="e.g. p99=50ms: maximise throughput within it")
    p.add_argument("--min-throughput", type=float, metavar="INFER/S", help="minimise latency at this throughput")
    p.add_argument("--percentile", type=int, choices=[50, 95, 99], default=99, help="latency percentile judged (99)")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds of the final candidates, at least (3; time left buys up to 3x)",
    )
    p.add_argument("--window", type=float, default=1.0, metavar="S", help="measurement window per load level (1.0)")
    p.add_argument("--warmup", type=float, default=0.5, metavar="S", help="load before each window (0.5)")
    p.add_argument(
        "--precisions",
        default="fp16,int8",
        help="precision variants to build with ferry optimize and try ('none' for none; default fp16,int8)",
    )
    p.add_argument("--calibration-images", type=Path, metavar="DIR", help="images to calibrate and judge INT8")
    p.add_argument("--calibration-tensors", type=Path, metavar="FILE.npy", help="input tensors for INT8")
    p.add_argument(
        "--input-data", type=Path, metavar="PATH", help="requests: a folder of images or a tensor file (random)"
    )
    p.add_argument(
        "--allow-python-models",
        action="store_true",
        help="tune a Triton Python model (model.py): its code runs in the tuner's server",
    )
    p.add_argument(
        "--allow-smaller-max-batch",
        action="store_true",
        help="let the tuned max_batch_size go below the model's own (clients' larger batches are then refused)",
    )
    p.add_argument("--plot", type=Path, metavar="PNG", help="latency against throughput of every candidate")
    p.add_argument("--write", action="store_true", help="replace config.pbtxt (kept as config.pbtxt.before-tune)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
