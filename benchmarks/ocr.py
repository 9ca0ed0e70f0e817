"""OCR benchmark: pages per second of Ferry's ``ocr`` model against rapidocr_onnxruntime 1.4.4's
own ``RapidOCR()`` on the same pages, in one run on one machine.

Pages: the 15 reference pages of ``model_repo/ocr/reference.py`` (scikit-image scans, crops,
rotations, rescales, rendered lines), PNG. The package runs in its own environment
(``--reference-python``, see ``model_repo/ocr/reference.py``) as a user runs it: one process,
pages one after another, its default onnxruntime threads. Ferry serves ``text_detector``,
``text_angle``, ``text_recognizer`` and ``ocr`` from ``model_repo/``; closed-loop clients
(``--concurrency``, one thread each) POST pages to ``/v2/models/ocr/ocr``. Each side first reads
every page once (warm-up, and a check that both read the same text), then the pages are read
``--rounds`` times; the figure is pages / wall seconds.

Run: python benchmarks/ocr.py [--rounds N] [--concurrency C] [--reference-python .refvenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(ROOT))
from serving import FerryProcess  # noqa: E402

from tests import ocr_reference as ocr  # noqa: E402

MODELS = (*ocr.MODELS, "ocr")
REFERENCE_RUN = """
import json, sys, time
from pathlib import Path
from rapidocr_onnxruntime import RapidOCR
pages = [p.read_bytes() for p in sorted(Path(sys.argv[1]).glob("*.png"))]
rounds = int(sys.argv[2])
engine = RapidOCR()
texts = [[line[1] for line in (engine(page)[0] or [])] for page in pages]
started = time.perf_counter()
for _ in range(rounds):
    for page in pages:
        engine(page)
elapsed = time.perf_counter() - started
print(json.dumps({"pages": rounds * len(pages), "seconds": elapsed, "texts": texts}))
"""


def run_reference(python: str, folder: Path, rounds: int) -> dict:
    done = subprocess.run(
        [python, "-c", REFERENCE_RUN, str(folder), str(rounds)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ferry(pages: list[bytes], rounds: int, concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        repo = Path(workdir) / "models"
        for model in MODELS:
            shutil.copytree(ocr.REPOSITORY / model, repo / model)
        server = FerryProcess(repo)
        try:
            url = f"http://{server.http_url}/v2/models/ocr/ocr"
            server.wait_ready(MODELS)
            with httpx.Client(timeout=300) as client:
                texts = [_read(client, url, page) for page in pages]
            work = [page for _ in range(rounds) for page in pages]
            lock = threading.Lock()

            def worker() -> None:
                with httpx.Client(timeout=300) as client:
                    while True:
                        with lock:
                            if not work:
                                return
                            page = work.pop()
                        _read(client, url, page)

            started = time.perf_counter()
            threads = [threading.Thread(target=worker) for _ in range(concurrency)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
        finally:
            server.stop()
    return {"pages": rounds * len(pages), "seconds": elapsed, "texts": texts}


def _read(client: httpx.Client, url: str, page: bytes) -> list[str]:
    response = client.post(url, content=page, headers={"content-type": "image/png"})
    response.raise_for_status()
    return [line["text"] for line in response.json()["results"][0]["lines"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="times every page is read (after the warm-up)")
    parser.add_argument("--concurrency", type=int, default=4, help="Ferry clients sending pages at once")
    parser.add_argument("--reference-python", default=str(ROOT / ".refvenv" / "bin" / "python"))
    args = parser.parse_args()
    ocr.ensure_models()
    pages = ocr.photos()
    with tempfile.TemporaryDirectory() as folder:
        for name, data in pages.items():
            (Path(folder) / f"{name}.png").write_bytes(data)
        ordered = [(Path(folder) / f"{name}.png").read_bytes() for name in sorted(pages)]
        reference = run_reference(args.reference_python, Path(folder), args.rounds)
    ferry = run_ferry(ordered, args.rounds, args.concurrency)
    same = ferry["texts"] == reference["texts"]
    rows = [("rapidocr_onnxruntime RapidOCR()", reference), (f"ferry ocr, {args.concurrency} clients", ferry)]
    print(f"{len(pages)} pages x {args.rounds} rounds; same text on every page: {same}")
    print(f"| {'pipeline':<34} | pages/s |")
    print(f"|{'-' * 36}|---------|")
    for label, result in rows:
        print(f"| {label:<34} | {result['pages'] / result['seconds']:7.2f} |")
    ratio = (ferry["pages"] / ferry["seconds"]) / (reference["pages"] / reference["seconds"])
    print(f"ferry / rapidocr: {ratio:.2f}x")


if __name__ == "__main__":
    main()
