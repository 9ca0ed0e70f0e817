"""``ferry tune``: its options and the run from model directory to table and tuned config."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc

from ..backends.registry import normalise_platform
from ..cli_errors import EXIT_USAGE, UserError
from ..cores import usable_cores
from ..errors import FerryError
from ..repository.config import read_config_file
from .candidates import Candidate, client_changes, cpu_layouts, current_candidate
from .measure import LoadPlan, Measurer
from .objective import Objective, parse_latency_budget
from .precision import PRECISIONS, Variant, build_variants
from .report import table, verdict, write_plot
from .runner import PrivateRepository, TuningError, TuningServer
from .search import Outcome, Search, Space
from .writer import machine_description, write_config

#: The shell's code for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def _levels(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{flag} '{text}': expected numbers separated by commas", EXIT_USAGE) from None
    if not values or any(v <= 0 for v in values):
        raise UserError(f"{flag} '{text}': every value must be > 0", EXIT_USAGE)
    return tuple(sorted(set(values)))


def _model_dir(args: argparse.Namespace) -> Path:
    if args.model_dir is not None and (args.repository or args.model):
        raise UserError("give MODEL_DIR or --repository with -m NAME, not both", EXIT_USAGE)
    if args.model_dir is None:
        if not (args.repository and args.model):
            raise UserError("give MODEL_DIR, or --repository DIR with -m NAME", EXIT_USAGE)
        model_dir = args.repository / args.model
    else:
        model_dir = args.model_dir
    if not (model_dir / "config.pbtxt").is_file():
        raise UserError(f"{model_dir}: no config.pbtxt (MODEL_DIR is a model's directory in a repository)")
    return model_dir.resolve()


def _objective(args: argparse.Namespace) -> Objective:
    percentile, budget = args.percentile, None
    if args.latency_budget:
        try:
            percentile, budget = parse_latency_budget(args.latency_budget)
        except ValueError as exc:
            raise UserError(str(exc), EXIT_USAGE) from None
    if args.min_throughput is not None and args.min_throughput <= 0:
        raise UserError("--min-throughput must be > 0", EXIT_USAGE)
    return Objective(percentile, budget, args.min_throughput)


def _precisions(text: str) -> tuple[str, ...]:
    if text.strip() == "none":
        return ()
    names = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown:
        raise UserError(f"--precisions: unknown {', '.join(unknown)} (choose from fp16, int8 or none)", EXIT_USAGE)
    return names


def _gpus() -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return [
            str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    except Exception:  # no NVML: no GPU this tool can use or watch
        return []


def _not_tried(config: mc.ModelConfig, gpus: list[str], current: Candidate, args: argparse.Namespace) -> list[str]:
    """Knobs this machine or model does not let the tuner try, in plain words."""
    notes = []
    if not gpus:
        notes.append("GPU instances (count per device): not tried, no NVIDIA GPU on this machine")
    elif current.kind == "CPU":
        notes.append("GPU instances: not tried, the config runs on CPU instances (give it KIND_GPU to tune them)")
    if not gpus or importlib.util.find_spec("tensorrt") is None:
        notes.append("TensorRT engines and the TensorRT EP: not tried (needs a GPU and ferry[tensorrt])")
    else:
        notes.append("TensorRT engines: not tried by ferry tune; build one with ferry optimize --engine tensorrt")
    if config.max_batch_size <= 0:
        notes.append("batch size and queue delay: not tried, the model has no batch dimension (max_batch_size 0)")
    if config.HasField("ferry_image") and (args.input_data is None or not args.input_data.is_dir()):
        notes.append("image pre-processing pool size: not tried, requests were tensors (send images: --input-data DIR)")
    notes.append("ONNX Runtime inter-op threads: not tried (they matter only for graphs with parallel branches)")
    return notes


def _is_onnx(config: mc.ModelConfig, model_dir: Path) -> bool:
    """ONNX Runtime serves it: the thread knobs apply and the batch size may grow past the config's."""
    try:
        platform = normalise_platform(config.platform, config.backend)
    except FerryError:
        return False
    return platform == "onnxruntime_onnx" or (not platform and any(model_dir.glob("*/model.onnx")))


def _space(
    config: mc.ModelConfig,
    current: Candidate,
    plan: LoadPlan,
    variants: list[Variant],
    gpus: list[str],
    onnx: bool,
    allow_smaller_batch: bool = False,
) -> Space:
    largest = 0
    if config.max_batch_size > 0:
        wanted = int(max(plan.levels)) if plan.mode == "concurrency" else 32
        largest = max(config.max_batch_size, wanted) if onnx else config.max_batch_size
    if current.kind == "GPU" and gpus:
        layouts: tuple[tuple[int, int], ...] = ((1, 0), (2, 0), (3, 0))
    elif current.kind == "GPU":
        layouts = ()
    else:
        layouts = tuple(cpu_layouts(usable_cores(), threads=current.threads > 0))
    images = config.HasField("ferry_image") and plan.input_data is not None and plan.input_data.is_dir()
    default_workers = os.cpu_count() or 1
    pools = sorted({n for n in (1, max(1, usable_cores() // 2), 2 * usable_cores()) if n != default_workers})
    return Space(
        image_workers=tuple(pools) if images else (),
        current=current,
        largest_batch=largest,
        smallest_batch=0 if allow_smaller_batch else max(0, config.max_batch_size),
        layouts=layouts,
        kind=current.kind,
        variants=tuple((v.name, v.precision) for v in variants),
    )


def _header(outcome: Outcome, objective: Objective, plan: LoadPlan, machine: str) -> list[str]:
    levels = ",".join(f"{v:g}" for v in plan.levels)
    load = f"concurrency {levels}" if plan.mode == "concurrency" else f"open-loop rate {levels} req/s"
    inputs = str(plan.input_data) if plan.input_data else "random tensors"
    lines = [
        f"Measured on {machine}.",
        f"Load: {load} over HTTP ({inputs}), {plan.window_s:g} s windows; {outcome.final_rounds} interleaved "
        "rounds of the final candidates.",
        f"Objective: {objective.describe()}; {len(outcome.summaries)} candidates in {outcome.seconds:.0f} s.",
    ]
    if outcome.winner is not None and outcome.winner.image_workers:
        lines.append(
            f"Serve with FERRY_IMAGE_WORKERS={outcome.winner.image_workers}: image pre-processing threads are a "
            "server setting, not part of this file."
        )
    if outcome.winner is not None:
        lines += [f"For clients: {change}" for change in client_changes(outcome.current, outcome.winner)]
    for candidate in (outcome.winner, outcome.current):
        if candidate is None:
            continue
        summary = outcome.summaries[candidate]
        q = objective.percentile
        points = "; ".join(
            f"{p.load:g}: {p.throughput:.1f} infer/s, p{q} {p.latency_ms[q]:.2f} ms" for p in summary.points
        )
        lines.append(f"{'This config' if candidate is outcome.winner else 'Previous config'} (medians): {points}")
    return lines


def run_tune(args: argparse.Namespace) -> int:
    started = time.monotonic()
    say: Callable[[str], None] = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    model_dir = _model_dir(args)
    objective = _objective(args)
    precisions = _precisions(args.precisions)
    mode = "rate" if args.request_rate else "concurrency"
    levels = (
        _levels(args.request_rate, "--request-rate")
        if args.request_rate
        else _levels(args.concurrency or "1,8", "--concurrency")
    )
    if args.rounds < 1 or args.window <= 0 or args.warmup < 0 or args.time_budget <= 0:
        raise UserError("--rounds must be >= 1, --window and --time-budget > 0, --warmup >= 0", EXIT_USAGE)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise UserError("--plot needs matplotlib, which is not installed (pip install matplotlib)")
    plan = LoadPlan(mode, levels, args.window, args.warmup, args.input_data)
    config = read_config_file(model_dir) or mc.ModelConfig()
    config.name = config.name or model_dir.name
    if config.platform == "ensemble":
        raise UserError(f"{model_dir}: ensembles are not tuned; tune each model they run")
    gpus = _gpus()
    machine = machine_description(usable_cores(), gpus)
    onnx = _is_onnx(config, model_dir)
    current = current_candidate(config, onnx)
    say(f"ferry tune: {config.name} on {machine}; budget {args.time_budget:g} s")
    # SIGTERM ends the run as Ctrl-C does: the servers stop and the private repository goes
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    repository: PrivateRepository | None = None
    try:
        repository = PrivateRepository(model_dir)
        outcome, notes = _measure(args, repository, config, current, plan, objective, precisions, onnx, gpus, started)
        _report(outcome, notes, args, objective, mode, config, gpus, current)
        if outcome.winner is not None:
            _write(outcome, args, repository, model_dir, config, _header(outcome, objective, plan, machine))
        else:
            print("no config written")
        return 0
    except (TuningError, OSError) as exc:  # a server that would not start or load; a file that cannot be written
        print(f"ferry tune: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ferry tune: interrupted; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if repository is not None:
            repository.remove()
        signal.signal(signal.SIGTERM, previous)


def _measure(
    args: argparse.Namespace,
    repository: PrivateRepository,
    config: mc.ModelConfig,
    current: Candidate,
    plan: LoadPlan,
    objective: Objective,
    precisions: tuple[str, ...],
    onnx: bool,
    gpus: list[str],
    started: float,
) -> tuple[Outcome, list[str]]:
    """Build the precision variants, start the server and run the search; notes say what was not tried."""
    say: Callable[[str], None] = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    variants: list[Variant] = []
    notes: list[str] = []
    if precisions and not onnx:
        notes.append("precision variants: not tried, ferry optimize converts ONNX models only")
    elif precisions:
        variants, notes = build_variants(repository, precisions, args.calibration_images, args.calibration_tensors, say)
    extra = ("--allow-python-models",) if args.allow_python_models else ()
    with TuningServer(repository, extra) as server:
        measurer = Measurer(server, plan, lambda workers: TuningServer(repository, extra, workers))
        try:
            server.use(current)
            measurer.prepare(current.model)
            space = _space(config, current, plan, variants, gpus, onnx, args.allow_smaller_max_batch)
            budget = args.time_budget - (time.monotonic() - started)
            outcome = Search(space, objective, measurer, budget, args.rounds, say=say).run()
        finally:
            measurer.close()
    notes += [f"{c.label()}: {e}" for c, e in measurer.load_errors.items()]
    return outcome, notes


def _report(
    outcome: Outcome,
    notes: list[str],
    args: argparse.Namespace,
    objective: Objective,
    mode: str,
    config: mc.ModelConfig,
    gpus: list[str],
    current: Candidate,
) -> None:
    print(table(outcome, mode))
    for line in verdict(outcome, objective, mode):
        print(line)
    for line in [*outcome.notes, *notes, *_not_tried(config, gpus, current, args)]:
        print(f"  note: {line}")
    if args.plot:
        write_plot(args.plot, outcome, objective, f"ferry tune: {config.name}")
        print(f"plot: {args.plot}")


def _write(
    outcome: Outcome,
    args: argparse.Namespace,
    repository: PrivateRepository,
    model_dir: Path,
    config: mc.ModelConfig,
    header: list[str],
) -> None:
    winner = outcome.winner
    assert winner is not None
    variant_dir = repository.root / winner.model if winner.model != config.name else None
    tuned = winner.apply(repository.config(winner.model))
    written = write_config(model_dir, tuned, header, args.write, variant_dir)
    print(f"wrote {written.path}")
    for line in written.notes:
        print(f"  {line}")
