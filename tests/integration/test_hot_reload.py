"""Model changes under load: load / unload / new versions while clients send. Requests finish on
the version they started on (the output says which), others get a clear not-ready answer, nothing
crashes, and the memory of an unloaded model comes back."""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

from ferry_client import FerryClientError, GrpcClient, HttpClient

from ..conftest import start_server
from ..models import write_mlp_model

WIDTH = 256
# what a caller may be told while the model is between versions, and nothing else
ALLOWED = re.compile(
    r"Request for unknown model: 'mlp' (is not found|has no available versions|version \d+ is not at ready state)"
    r"|model 'mlp' .*(unloaded|unloading|UNAVAILABLE)|is unloading"
)


class Load:
    """Client threads (HTTP and gRPC) sending until stopped, checking every answer."""

    def __init__(self, server, threads: int = 6) -> None:
        self.server = server
        self.stop = threading.Event()
        self.outcomes: Counter = Counter()
        self.unexpected: list[str] = []
        self.versions_seen: list[str] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        x = np.full((1, WIDTH), float(index), np.float32)
        client = HttpClient(self.server.http_url) if index % 2 else GrpcClient(self.server.grpc_url)
        with client:
            while not self.stop.is_set():
                try:
                    result = client.infer("mlp", {"x": x})
                    offset = float(result.model_version)  # version N adds N: the output names its version
                    ok = np.allclose(result["y"], x + offset)
                    with self._lock:
                        self.outcomes["ok" if ok else "wrong"] += 1
                        self.versions_seen.append(result.model_version)
                except FerryClientError as exc:
                    with self._lock:
                        if ALLOWED.search(str(exc)):
                            self.outcomes["not ready"] += 1
                        else:
                            self.unexpected.append(str(exc))
                time.sleep(0.002)

    def wait_for_more(self, outcome: str, count: int) -> None:
        """Until ``count`` more answers of this kind than now have come back: phases of a test follow
        what the clients saw, not the clock."""
        with self._lock:
            target = self.outcomes[outcome] + count
        _wait(lambda: self.outcomes[outcome] >= target)

    def wait_for_version(self, version: str) -> None:
        _wait(lambda: version in self.versions_seen)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(30)


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_load_unload_and_new_versions_under_load(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_mlp_model(repo / "mlp", width=WIDTH, layers=4, offset=1.0, version=1, extra_config="dynamic_batching { }\n")
    server = start_server(repo, tmp_path / "server.log", "--model-control-mode", "explicit", "--load-model", "mlp")
    try:
        with HttpClient(server.http_url) as admin, Load(server) as load:
            load.wait_for_more("ok", 20)
            admin.unload_model("mlp")
            load.wait_for_more("not ready", 1)  # the unload was seen, and answered clearly
            admin.load_model("mlp")
            load.wait_for_more("ok", 20)
            write_mlp_model(
                repo / "mlp", width=WIDTH, layers=4, offset=2.0, version=2, extra_config="dynamic_batching { }\n"
            )
            admin.load_model("mlp")  # reload: version 2 replaces 1 once READY (latest policy)
            load.wait_for_version("2")
            admin.load_model("mlp", config={"max_batch_size": 4, "dynamic_batching": {}})  # a config change
            load.wait_for_more("ok", 20)
        assert not load.unexpected, load.unexpected[:5]
        assert load.outcomes["wrong"] == 0, load.outcomes
        assert load.versions_seen[-1] == "2"
        assert server.process.poll() is None
    finally:
        server.stop()


def test_poll_mode_version_change_drops_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_mlp_model(repo / "mlp", width=WIDTH, layers=4, offset=1.0, version=1, extra_config="dynamic_batching { }\n")
    server = start_server(
        repo, tmp_path / "server.log", "--model-control-mode", "poll", "--repository-poll-secs", "0.2"
    )
    try:
        with Load(server) as load:
            load.wait_for_more("ok", 20)
            staging = tmp_path / "staging"
            write_mlp_model(staging / "mlp", width=WIDTH, layers=4, offset=2.0, version=2)
            (staging / "mlp" / "2").rename(repo / "mlp" / "2")
            load.wait_for_version("2")
            first_two = load.versions_seen.index("2")
            _wait(lambda: len(load.versions_seen) > first_two + 100)
        # the old version served until the new one was READY: not a single request refused
        assert load.outcomes["not ready"] == 0 and not load.unexpected, (load.outcomes, load.unexpected[:3])
        assert load.outcomes["wrong"] == 0 and load.versions_seen[0] == "1"
        assert "1" not in load.versions_seen[first_two + 50 :]  # once switched, new requests stay on 2
    finally:
        server.stop()


def test_memory_comes_back_after_unload(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    # 96 MiB of dense weights (identity weights are mostly zero pages, which need not be resident)
    write_mlp_model(repo / "big", width=2048, layers=6, dense=True)
    server = start_server(repo, tmp_path / "server.log", "--model-control-mode", "explicit")
    process = psutil.Process(server.process.pid)
    try:
        with HttpClient(server.http_url) as client:
            x = np.ones((2, 2048), np.float32)

            def cycle() -> tuple[int, int]:
                client.load_model("big")
                client.infer("big", {"x": x})
                loaded = process.memory_info().rss
                client.unload_model("big")
                _wait(lambda: [r["state"] for r in client.repository_index() if r["name"] == "big"] == ["UNAVAILABLE"])
                return loaded, process.memory_info().rss

            cycle()  # the first load pays one-off costs (libraries, arenas)
            baseline = process.memory_info().rss
            rounds = [cycle() for _ in range(4)]
        for loaded, unloaded in rounds:
            assert loaded - unloaded > 60 * 2**20, rounds  # most of the model's memory is released on unload
        growth = rounds[-1][1] - baseline
        released = [round((loaded - unloaded) / 2**20) for loaded, unloaded in rounds]
        print(
            f"RSS released per unload (MiB): {released}; after 4 load/unload cycles of a 96 MiB model: "
            f"{growth / 2**20:+.1f} MiB vs after the first"
        )
        assert growth < 40 * 2**20, rounds
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
