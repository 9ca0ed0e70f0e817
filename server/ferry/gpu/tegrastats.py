"""GPU metrics on NVIDIA Jetson, where NVML does not exist.

Jetson modules report GPU load, memory and power through ``tegrastats``, a tool that prints one
line of readings per interval. This module parses those lines (the formats of JetPack 6, 5, 4 and
the older L4T 28 releases), runs ``tegrastats --interval N`` in the background keeping the newest
reading, and exports it under the names ``ferry.metrics.GpuCollector`` uses for NVML, so one
dashboard serves datacenter GPUs and Jetson alike.

Mapping onto the NVML names (label ``gpu="0"``: a Jetson has one integrated GPU):

- ``nv_gpu_utilization``: the GR3D (3D engine) load, 0..1;
- ``nv_gpu_memory_used_bytes`` / ``nv_gpu_memory_total_bytes``: the ``RAM`` reading. The GPU shares
  system memory with the CPU, so this is what the GPU can use, not a dedicated pool;
- ``nv_gpu_power_usage``: the module's input power in watts (``VDD_IN`` / ``POM_5V_IN``), or the sum
  of the rails tegrastats reports when the module has no input rail (AGX Xavier, AGX Orin). It is
  the closest equivalent of NVML's board power; it includes the CPU.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

_UNITS = {"k": 1024, "K": 1024, "M": 1024**2, "G": 1024**3}
# "RAM 2345/7620MB (lfb 12x4MB)": used/total, in MiB despite the "MB".
_RAM = re.compile(r"\bRAM (\d+)/(\d+)([kKMG])B\b")
# "GR3D_FREQ 45%" (JetPack 6), "GR3D_FREQ 0%@[305,305]" (JetPack 5), "GR3D_FREQ 0%@76" (JetPack 4),
# "GR3D 0%@76" (L4T 28).
_GR3D = re.compile(r"\bGR3D(?:_FREQ)? (\d+)%(?:@\[?(\d+))?")
# Power rails: "VDD_IN 5000mW/5000mW" (JetPack 5/6), "POM_5V_IN 1236/1236" and "GPU 0/0" (JetPack 4):
# the instant and the average reading in milliwatts. "RAM 1/2MB" and the like never match: their
# second number runs into a unit.
_RAIL = re.compile(r"(?<![\w@\[,])([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?![\w/])")
# Temperatures: "gpu@47.2C", "CPU@40C", "CV0@-256C" (-256 marks a sensor that is off).
_TEMP = re.compile(r"(?<![\w@])([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")
_NOT_RAILS = frozenset({"RAM", "SWAP", "IRAM"})
# Rails that measure the whole module's input, best first.
_INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
_SENSOR_OFF_C = -256.0


@dataclass(frozen=True)
class TegraSample:
    """One tegrastats reading."""

    gpu_util: float
    """GR3D (GPU) load, 0..1."""
    ram_used_bytes: int
    ram_total_bytes: int
    power_watts: float | None
    """Module input power (instant), or the sum of the reported rails; None when no rail is printed."""
    gpu_freq_mhz: int | None = None
    gpu_power_watts: float | None = None
    """The first rail whose name mentions the GPU (often shared with the CPU or SoC); None if none."""
    rails_watts: Mapping[str, float] = field(default_factory=dict)
    """Every power rail's instant reading in watts, by tegrastats' name."""
    temperatures_c: Mapping[str, float] = field(default_factory=dict)
    """Every active temperature sensor in degrees Celsius, by tegrastats' name."""


def parse_tegrastats(line: str) -> TegraSample:
    """Parse one line of tegrastats output.

    Raises ValueError when the line has no GR3D or RAM reading (not a tegrastats line).
    """
    gr3d = _GR3D.search(line)
    ram = _RAM.search(line)
    if gr3d is None or ram is None:
        missing = " and ".join(name for name, m in (("GR3D", gr3d), ("RAM", ram)) if m is None)
        raise ValueError(f"not a tegrastats line (no {missing} reading): {line.strip()[:120]!r}")
    unit = _UNITS[ram.group(3)]
    rails: dict[str, float] = {}
    for match in _RAIL.finditer(line):
        name = match.group(1)
        if name not in _NOT_RAILS and name not in rails:
            rails[name] = int(match.group(2)) / 1000
    power = next((rails[name] for name in _INPUT_RAILS if name in rails), None)
    if power is None and rails:
        power = sum(rails.values())
    temperatures = {m.group(1): float(m.group(2)) for m in _TEMP.finditer(line) if float(m.group(2)) > _SENSOR_OFF_C}
    return TegraSample(
        gpu_util=min(int(gr3d.group(1)), 100) / 100,
        ram_used_bytes=int(ram.group(1)) * unit,
        ram_total_bytes=int(ram.group(2)) * unit,
        power_watts=power,
        gpu_freq_mhz=int(gr3d.group(2)) if gr3d.group(2) is not None else None,
        gpu_power_watts=next((watts for name, watts in rails.items() if "GPU" in name), None),
        rails_watts=rails,
        temperatures_c=temperatures,
    )


class TegrastatsReader:
    """Runs ``tegrastats --interval N`` and keeps the newest parsed reading.

    ``command`` is the program and any leading arguments (tests pass a fake); the reader appends
    ``--interval`` in milliseconds. Lines that do not parse are skipped (and counted).
    """

    def __init__(self, interval_s: float = 1.0, command: Sequence[str] = ("tegrastats",)) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.command = [*command, "--interval", str(max(1, round(interval_s * 1000)))]
        self.bad_lines = 0
        self._lock = threading.Lock()
        self._latest: tuple[TegraSample, float] | None = None
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start tegrastats; raises OSError when it cannot be run."""
        if self._process is not None:
            return
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._thread = threading.Thread(target=self._read, args=(self._process,), name="tegrastats", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def latest(self, max_age_s: float | None = None) -> TegraSample | None:
        """The newest reading, or None when there is none yet or it is older than ``max_age_s``."""
        with self._lock:
            latest = self._latest
        if latest is None:
            return None
        sample, at = latest
        if max_age_s is not None and time.monotonic() - at > max_age_s:
            return None
        return sample

    def stop(self, timeout: float = 2.0) -> None:
        """Stop tegrastats and the reading thread."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._thread is not None:  # tegrastats is gone, so the thread reads end-of-file and ends
            self._thread.join(timeout)
            self._thread = None
        if process is not None and process.stdout is not None:
            process.stdout.close()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                if not line.strip():
                    continue
                try:
                    sample = parse_tegrastats(line)
                except ValueError as exc:
                    self.bad_lines += 1
                    log.debug("%s", exc)
                    continue
                with self._lock:
                    self._latest = (sample, time.monotonic())
        except (OSError, ValueError):  # the pipe was closed by stop()
            return
        if self._process is process:
            log.warning("tegrastats exited with %s; Jetson GPU metrics stop", process.wait())


class TegrastatsCollector(Collector):
    """Jetson GPU metrics under NVML's names (see the module docstring); nothing while readings are stale."""

    def __init__(self, reader: TegrastatsReader, max_age_s: float | None = None) -> None:
        self.reader = reader
        self.max_age_s = max_age_s if max_age_s is not None else max(5.0, 5 * reader.interval_s)

    @classmethod
    def create(cls, interval_s: float = 1.0) -> TegrastatsCollector | None:
        """A collector reading a running tegrastats, or None where there is no tegrastats (not a Jetson)."""
        program = shutil.which("tegrastats")
        if program is None:
            return None
        reader = TegrastatsReader(interval_s, (program,))
        try:
            reader.start()
        except OSError as exc:
            log.warning("Jetson GPU metrics disabled: cannot run %s: %s", program, exc)
            return None
        return cls(reader)

    def close(self) -> None:
        self.reader.stop()

    def collect(self) -> Iterable[Metric]:
        util = GaugeMetricFamily("nv_gpu_utilization", "GPU utilisation (0..1)", labels=["gpu"])
        total = GaugeMetricFamily("nv_gpu_memory_total_bytes", "GPU memory total", labels=["gpu"])
        used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"])
        power = GaugeMetricFamily("nv_gpu_power_usage", "GPU power draw (watts)", labels=["gpu"])
        sample = self.reader.latest(self.max_age_s)
        if sample is not None:
            label = ["0"]
            util.add_metric(label, sample.gpu_util)
            total.add_metric(label, sample.ram_total_bytes)
            used.add_metric(label, sample.ram_used_bytes)
            if sample.power_watts is not None:
                power.add_metric(label, sample.power_watts)
        yield from (util, total, used, power)
