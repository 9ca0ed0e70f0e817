"""What ONNX Runtime holds while it runs a model, per byte of input: the number to set as the
model's ``working_memory_factor`` parameter (docs/reliability.md, "Engine working memory").

Each shape runs in a fresh process with the session options Ferry uses (every core of this
machine, ORT's CPU arena): the RSS before the run (session built, input allocated) and the peak
during it (``ru_maxrss``). The growth includes the outputs and the arena ORT keeps. Run::

    python benchmarks/working_memory.py model_repo/text_detector 1,3,1184,1184 1,3,2400,3200
    python benchmarks/working_memory.py model_repo/text_recognizer 1,3,48,4096 8,3,48,320

Prints one row per shape: input MB, RSS growth MB, growth per input byte.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
from pathlib import Path
from typing import Any

MB = 1_000_000


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _measure(model: str, shape: tuple[int, ...], results: Any) -> None:
    """In a fresh process: build the session, allocate the input, run once; put (input bytes,
    growth of the peak RSS over the RSS before the run)."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    [feed] = session.get_inputs()
    data = np.random.default_rng(0).random(shape, dtype=np.float32)
    data[:] += 0  # touch every page
    before = max(_rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    session.run(None, {feed.name: data})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    results.put((data.nbytes, peak - before))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a model directory (its 1/model.onnx)")
    parser.add_argument("shapes", nargs="+", help="input shapes, batch first: 1,3,1184,1184")
    args = parser.parse_args()
    model = str(args.model_dir / "1" / "model.onnx")
    spawn = multiprocessing.get_context("spawn")
    print("| input shape | input (MB) | RSS growth (MB) | bytes per input byte |")
    print("|---|---|---|---|")
    for text in args.shapes:
        shape = tuple(int(side) for side in text.split(","))
        results = spawn.Queue()
        child = spawn.Process(target=_measure, args=(model, shape, results))
        child.start()
        nbytes, grew = results.get()
        child.join()
        print(f"| {list(shape)} | {nbytes / MB:.1f} | {grew / MB:.0f} | {grew / nbytes:.1f} |", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
