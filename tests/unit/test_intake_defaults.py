"""What the intake processes take from the machine: usable cores (affinity capped by a cgroup v2 CPU
quota) and a writable directory for their private sockets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.cores import usable_cores
from ferry.intake import supervisor
from ferry.intake.supervisor import intake_process_count
from ferry.settings import Settings


def test_a_quota_caps_the_affinity(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # 1.5 cores of quota: 2 usable
    assert usable_cores(cpu_max) == min(affinity, 2)
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == affinity
    assert usable_cores(tmp_path / "missing") == affinity


@pytest.mark.parametrize(("cores", "by_default"), [(1, 1), (2, 1), (8, 2), (16, 4), (64, 8)])
def test_the_option_wins_over_the_machine(monkeypatch: pytest.MonkeyPatch, cores: int, by_default: int) -> None:
    """Without the option, one intake process per four usable cores, at least one and at most eight."""
    monkeypatch.setattr(supervisor, "usable_cores", lambda: cores)
    assert intake_process_count(Settings(intake_processes=0)) == by_default
    assert intake_process_count(Settings(intake_processes=3)) == 3


def test_the_private_socket_directory_falls_back_to_dev_shm(monkeypatch) -> None:
    """With no writable temp dir (a read-only root filesystem), the sockets go to /dev/shm."""
    import tempfile

    real = tempfile.mkdtemp

    def no_tmp(prefix: str = "", dir: str | None = None) -> str:  # noqa: A002 - tempfile's own name
        if dir is None:
            raise FileNotFoundError("no usable temporary directory")
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(supervisor.tempfile, "mkdtemp", no_tmp)
    directory = supervisor._private_directory()
    try:
        assert directory.startswith("/dev/shm/ferry-intake-")
        assert os.stat(directory).st_mode & 0o777 == 0o700
    finally:
        os.rmdir(directory)
