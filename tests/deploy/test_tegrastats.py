"""Jetson GPU metrics: the tegrastats parser on lines of several JetPack releases, the background
reader (against a fake tegrastats), and the collector's names against the NVML collector's."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ferry.gpu.tegrastats import TegrastatsCollector, TegrastatsReader, parse_tegrastats
from ferry.metrics import GpuCollector

MIB = 1024 * 1024

# Lines as tegrastats prints them, one per module and release.
JP6_ORIN_NANO = (
    "12-03-2024 14:02:11 RAM 2345/7620MB (lfb 5x4MB) SWAP 0/3810MB (cached 0MB) "
    "CPU [12%@1510,8%@1510,5%@1510,9%@1510,3%@1510,2%@1510] EMC_FREQ 7%@2133 GR3D_FREQ 45% "
    "cpu@51.281C soc2@49.812C soc0@50.343C gpu@50.156C tj@51.281C soc1@49.5C "
    "VDD_IN 5000mW/4872mW VDD_CPU_GPU_CV 1200mW/1143mW VDD_SOC 1512mW/1490mW"
)
JP6_AGX_ORIN = (
    "RAM 8123/62841MB (lfb 10211x4MB) SWAP 0/31421MB (cached 0MB) "
    "CPU [3%@1728,1%@1728,0%@1728,2%@1728,off,off,off,off,0%@1728,0%@1728,1%@1728,0%@1728] "
    "EMC_FREQ 0%@3199 GR3D_FREQ 98%@[1300,1300] NVENC off NVDEC off NVJPG off NVJPG1 off VIC off OFA off "
    "NVDLA0 off NVDLA1 off PVA0_FREQ off APE 174 cpu@55.3C soc2@52.1C soc0@53.6C CV0@-256C gpu@58.9C "
    "tj@58.9C soc1@52.8C CV2@-256C CV1@-256C VDD_GPU_SOC 14792mW/14100mW VDD_CPU_CV 1592mW/1600mW "
    "VIN_SYS_5V0 6221mW/6180mW VDDQ_VDD2_1V8AO 1105mW/1100mW"
)
JP5_ORIN_NX = (
    "RAM 3187/15389MB (lfb 2845x4MB) SWAP 0/7695MB (cached 0MB) "
    "CPU [2%@729,0%@729,0%@729,1%@729,0%@729,0%@729,0%@729,0%@729] EMC_FREQ 0%@3199 GR3D_FREQ 0%@[305,305] "
    "VIC_FREQ 115 APE 200 CPU@43.5C Tboard@32C SOC2@40.031C Tdiode@34.25C SOC0@40.812C CV1@-256C GPU@-256C "
    "tj@44.062C SOC1@39.968C CV2@-256C VDD_IN 5337mW/5337mW VDD_CPU_GPU_CV 556mW/556mW VDD_SOC 1545mW/1545mW"
)
JP4_NANO = (
    "RAM 2195/3956MB (lfb 93x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
    "CPU [3%@102,1%@102,0%@102,0%@102] EMC_FREQ 0%@1600 GR3D_FREQ 27%@921 APE 25 PLL@21C CPU@23.5C "
    "iwlwifi@28C PMIC@100C GPU@22C AO@31C thermal@22.75C POM_5V_IN 3341/2873 POM_5V_GPU 1166/702 "
    "POM_5V_CPU 416/390"
)
JP4_AGX_XAVIER = (
    "RAM 2813/31919MB (lfb 6983x4MB) SWAP 0/15959MB (cached 0MB) "
    "CPU [2%@1190,1%@1190,0%@1190,0%@1190,off,off,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 0%@318 APE 150 "
    "MTS fg 0% bg 0% AO@38.5C GPU@39C Tdiode@41.75C PMIC@100C AUX@38C CPU@40C thermal@39.3C Tboard@39C "
    "GPU 153/153 CPU 311/311 SOC 1713/1713 CV 0/0 VDDRQ 311/311 SYS5V 2016/2016"
)
JP4_TX2 = (
    "RAM 1635/7846MB (lfb 1242x4MB) SWAP 0/3923MB (cached 0MB) CPU [4%@345,off,off,2%@345,3%@345,1%@345] "
    "EMC_FREQ 3%@1866 GR3D_FREQ 0%@114 APE 150 PLL@33.5C MCPU@33.5C PMIC@100C Tboard@30C GPU@31C "
    "BCPU@33.5C thermal@32.6C Tdiode@30.75C VDD_SYS_GPU 153/153 VDD_SYS_SOC 460/460 VDD_4V0_WIFI 0/0 "
    "VDD_IN 2375/2375 VDD_SYS_CPU 153/153 VDD_SYS_DDR 231/231"
)
L4T28_TX1 = (
    "RAM 1339/3854MB (lfb 527x4MB) cpu [10%@204,off,off,off] EMC 5%@1600 AVP 0%@80 VDE 0 GR3D 0%@76 EDP limit 1734"
)


@pytest.mark.parametrize(
    ("line", "util", "used_mib", "total_mib", "power", "freq", "gpu_power"),
    [
        pytest.param(JP6_ORIN_NANO, 0.45, 2345, 7620, 5.0, None, 1.2, id="jp6-orin-nano"),
        pytest.param(JP6_AGX_ORIN, 0.98, 8123, 62841, 14.792 + 1.592 + 6.221 + 1.105, 1300, 14.792, id="jp6-agx-orin"),
        pytest.param(JP5_ORIN_NX, 0.0, 3187, 15389, 5.337, 305, 0.556, id="jp5-orin-nx"),
        pytest.param(JP4_NANO, 0.27, 2195, 3956, 3.341, 921, 1.166, id="jp4-nano"),
        pytest.param(
            JP4_AGX_XAVIER, 0.0, 2813, 31919, 0.153 + 0.311 + 1.713 + 0.311 + 2.016, 318, 0.153, id="jp4-agx-xavier"
        ),
        pytest.param(JP4_TX2, 0.0, 1635, 7846, 2.375, 114, 0.153, id="jp4-tx2"),
        pytest.param(L4T28_TX1, 0.0, 1339, 3854, None, 76, None, id="l4t28-tx1"),
    ],
)
def test_parse_lines_of_each_release(
    line: str,
    util: float,
    used_mib: int,
    total_mib: int,
    power: float | None,
    freq: int | None,
    gpu_power: float | None,
) -> None:
    sample = parse_tegrastats(line + "\n")
    assert sample.gpu_util == pytest.approx(util)
    assert 0.0 <= sample.gpu_util <= 1.0
    assert sample.ram_used_bytes == used_mib * MIB
    assert sample.ram_total_bytes == total_mib * MIB
    if power is None:
        assert sample.power_watts is None
    else:
        assert sample.power_watts == pytest.approx(power)
    assert sample.gpu_freq_mhz == freq
    if gpu_power is None:
        assert sample.gpu_power_watts is None
    else:
        assert sample.gpu_power_watts == pytest.approx(gpu_power)


def test_rails_exclude_memory_readings() -> None:
    nano = parse_tegrastats(JP4_NANO)
    assert nano.rails_watts == {"POM_5V_IN": 3.341, "POM_5V_GPU": 1.166, "POM_5V_CPU": 0.416}
    xavier = parse_tegrastats(JP4_AGX_XAVIER)
    assert set(xavier.rails_watts) == {"GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"}
    assert parse_tegrastats(L4T28_TX1).rails_watts == {}


def test_temperatures_skip_sensors_that_are_off() -> None:
    agx = parse_tegrastats(JP6_AGX_ORIN)
    assert agx.temperatures_c["gpu"] == pytest.approx(58.9)
    assert not {"CV0", "CV1", "CV2"} & set(agx.temperatures_c)
    orin_nx = parse_tegrastats(JP5_ORIN_NX)
    assert "GPU" not in orin_nx.temperatures_c
    assert orin_nx.temperatures_c["tj"] == pytest.approx(44.062)
    xavier = parse_tegrastats(JP4_AGX_XAVIER)
    assert xavier.temperatures_c["GPU"] == 39.0  # the temperature, not the "GPU 153/153" power rail


@pytest.mark.parametrize(
    "line",
    [
        "",
        "tegrastats: command not found",
        "RAM 2345/7620MB (lfb 5x4MB) SWAP 0/3810MB (cached 0MB)",
        "GR3D_FREQ 45% VDD_IN 5000mW/5000mW",
    ],
)
def test_lines_without_gpu_or_ram_are_rejected(line: str) -> None:
    with pytest.raises(ValueError, match="not a tegrastats line"):
        parse_tegrastats(line)


def _fake_tegrastats(tmp_path: Path, lines: list[str], then_sleep: float = 60) -> list[str]:
    """A stand-in for tegrastats: prints the lines (and one bad line), then idles until killed."""
    script = tmp_path / "tegrastats.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        assert sys.argv[1:3] == ["--interval", "100"], sys.argv
        print("some banner that is not a reading", flush=True)
        for line in {lines!r}:
            print(line, flush=True)
            time.sleep(0.05)
        time.sleep({then_sleep})
    """)
    )
    return [sys.executable, str(script)]


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_reader_keeps_the_newest_reading(tmp_path: Path) -> None:
    reader = TegrastatsReader(0.1, _fake_tegrastats(tmp_path, [JP4_NANO, JP6_ORIN_NANO]))
    assert reader.latest() is None
    reader.start()
    try:
        _wait_for(lambda: (s := reader.latest()) is not None and s.gpu_util == pytest.approx(0.45))
        assert reader.running
        assert reader.bad_lines == 1
        assert reader.latest(max_age_s=0) is None  # any reading is older than zero seconds
    finally:
        reader.stop()
    assert not reader.running


def test_reader_survives_tegrastats_exiting(tmp_path: Path) -> None:
    reader = TegrastatsReader(0.1, _fake_tegrastats(tmp_path, [JP5_ORIN_NX], then_sleep=0))
    reader.start()
    try:
        _wait_for(lambda: not reader.running)
        assert reader.latest() is not None and reader.latest().gpu_freq_mhz == 305
    finally:
        reader.stop()


def test_reader_reports_a_missing_program(tmp_path: Path) -> None:
    reader = TegrastatsReader(1.0, [str(tmp_path / "no-such-tegrastats")])
    with pytest.raises(OSError):
        reader.start()


def _families(collector) -> dict[str, tuple[str, list]]:
    return {family.name: (family.type, family.samples) for family in collector.collect()}


def test_collector_exports_nvml_names(tmp_path: Path) -> None:
    reader = TegrastatsReader(0.1, _fake_tegrastats(tmp_path, [JP6_ORIN_NANO]))
    collector = TegrastatsCollector(reader)
    reader.start()
    try:
        _wait_for(lambda: reader.latest() is not None)
        families = _families(collector)
    finally:
        collector.close()
    values = {name: samples[0].value for name, (_, samples) in families.items()}
    assert values == {
        "nv_gpu_utilization": pytest.approx(0.45),
        "nv_gpu_memory_total_bytes": 7620 * MIB,
        "nv_gpu_memory_used_bytes": 2345 * MIB,
        "nv_gpu_power_usage": pytest.approx(5.0),
    }
    for _, samples in families.values():
        assert [s.labels for s in samples] == [{"gpu": "0"}]

    # Same families, types and labels as the NVML collector on a datacenter GPU.
    fake_nvml = SimpleNamespace(
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=50),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 << 30, used=1 << 30),
        nvmlDeviceGetPowerUsage=lambda h: 300_000,
    )
    nvml_families = _families(GpuCollector(fake_nvml))
    assert {n: t for n, (t, _) in nvml_families.items()} == {n: t for n, (t, _) in families.items()}
    assert [s.labels for _, samples in nvml_families.values() for s in samples] == [
        s.labels for _, samples in families.values() for s in samples
    ]


def test_collector_is_empty_while_readings_are_stale() -> None:
    collector = TegrastatsCollector(TegrastatsReader(1.0, ["unused"]))
    families = _families(collector)
    assert set(families) == {
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
    }
    assert all(samples == [] for _, samples in families.values())


def test_create_returns_none_without_tegrastats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert TegrastatsCollector.create() is None
