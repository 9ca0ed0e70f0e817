"""JSON-output amplification (issue 24): a 4 MiB binary request asking for its 1M-number answer as
JSON costs ~60 MB while it is encoded (Python numbers, then text). Admission must count that peak,
so a burst of them runs about one at a time under a small ``--max-inflight-bytes`` and the rest are
refused (503 naming the cap), instead of all being encoded at once. Server RSS is sampled through
the burst and must stay within a bound that the unbounded burst exceeds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import psutil
import pytest

from ferry_client.codec import HEADER_LENGTH

from ..conftest import RunningServer, start_server
from ..models import write_mlp_model

pytestmark = pytest.mark.timeout(180)

WIDTH = 1024
ROWS = 1024  # 1M numbers: 4 MiB binary in, ~18 MB of JSON text out, ~60 MB while encoding
CAP = 96 * 2**20
BURST = 8
RSS_BOUND = 200 * 2**20


@pytest.fixture(scope="module")
def amplified(tmp_path_factory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("hostile_amplification") / "models"
    write_mlp_model(repo / "quick", width=WIDTH, layers=1, max_batch_size=ROWS)
    running = start_server(repo, repo.parent / "server.log", "--max-inflight-bytes", str(CAP))
    yield running
    running.stop()


def _request(server: RunningServer) -> httpx.Response:
    x = np.full((ROWS, WIDTH), 0.123456789, np.float32)
    header = b'{"inputs":[{"name":"x","shape":[%d,%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}' % (
        ROWS,
        WIDTH,
        x.nbytes,
    )
    return httpx.post(
        f"http://{server.http_url}/v2/models/quick/infer",
        content=header + x.tobytes(),
        headers={HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"},
        timeout=120,
    )


def test_json_answers_count_their_encoding_peak(amplified) -> None:
    server = psutil.Process(amplified.process.pid)
    assert _request(amplified).status_code == 200  # warm: first-request costs before measuring
    before = server.memory_info().rss
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, server.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(BURST) as pool:
            answers = list(pool.map(lambda _: _request(amplified), range(BURST)))
    finally:
        done.set()
        sampler.join()
    statuses = sorted(answer.status_code for answer in answers)
    assert 200 in statuses and set(statuses) <= {200, 503}, statuses
    for answer in answers:
        if answer.status_code == 503:
            assert "--max-inflight-bytes" in answer.json()["error"]
        else:
            assert len(answer.json()["outputs"][0]["data"]) == ROWS * WIDTH
    grown = peak - before
    print(f"statuses {statuses}; server RSS peak +{grown / 2**20:.0f} MiB")
    assert grown < RSS_BOUND, f"server RSS peaked {grown / 2**20:.0f} MiB above its level before the burst"
