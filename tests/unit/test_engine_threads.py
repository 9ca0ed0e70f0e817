"""Engines size their thread pools from the usable cores (affinity, cgroup quota), not os.cpu_count().

The tests restrict this thread's CPU affinity to one core (the condition a container's cpuset
creates) and check what the engines were given; cgroup quotas are read from files the test writes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.cores import cpu_quota, usable_cores
from ferry.repository.config import read_config_file
from ferry.repository.model import instance_specs, load_version
from ferry_client.protocol import model_config_pb2 as mc

REPO = Path(__file__).resolve().parents[2] / "model_repo"


@pytest.fixture
def one_core() -> Iterator[None]:
    """This thread may run on one core only (os.sched_getaffinity(0) is per thread on Linux)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpu_config(count: int) -> mc.ModelConfig:
    return mc.ModelConfig(
        name="m", instance_group=[mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_CPU, count=count)]
    )


def test_cgroup_v1_quota_is_read_when_v2_is_absent(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("150000\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(tmp_path / "no-cpu.max", tmp_path) == 1.5
    assert usable_cores(tmp_path / "no-cpu.max", tmp_path) == min(len(os.sched_getaffinity(0)), 2)
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota(tmp_path / "no-cpu.max", tmp_path) is None


def test_instances_split_the_usable_cores(one_core: None) -> None:
    assert [spec.threads for spec in instance_specs(cpu_config(1), gpu_available=False)] == [1]
    assert [spec.threads for spec in instance_specs(cpu_config(3), gpu_available=False)] == [1, 1, 1]


def test_instances_split_the_affinity_evenly() -> None:
    cores = len(os.sched_getaffinity(0))
    assert [spec.threads for spec in instance_specs(cpu_config(2), gpu_available=False)] == [max(1, cores // 2)] * 2


def test_onnxruntime_sessions_get_the_split(one_core: None, tmp_path: Path) -> None:
    model_dir = tmp_path / "simple"
    shutil.copytree(REPO / "simple", model_dir)
    config = read_config_file(model_dir)
    assert config is not None
    model = load_version(model_dir, 1, config, "test")
    try:
        threads = [instance.session.get_session_options().intra_op_num_threads for instance in model.instances]
        assert threads and set(threads) == {1}
    finally:
        model.close()


@pytest.mark.torch
def test_torch_pool_is_capped_at_the_usable_cores(one_core: None) -> None:
    torch = pytest.importorskip("torch")
    from ferry.backends.pytorch import cap_torch_threads

    before = torch.get_num_threads()
    torch.set_num_threads(max(2, before))
    try:
        cap_torch_threads(usable_cores())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
