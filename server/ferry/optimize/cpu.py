"""Which INT8 scheme suits this CPU, from the instruction-set flags the kernel reports.

ONNX Runtime's x86 INT8 kernels multiply unsigned 8-bit activations by signed 8-bit weights. With
VNNI (``avx512_vnni``, ``avx_vnni``) or AMX that product is one exact instruction; without it the
AVX2/AVX-512 path (``vpmaddubsw``) can saturate its 16-bit sums, which ``reduce_range`` (7-bit
weights) avoids at a small cost in precision. Arm's dot-product instructions are signed by
signed, and TensorRT accepts only symmetric signed INT8, so those targets get S8S8.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from onnxruntime.quantization import QuantType

VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@dataclass(frozen=True)
class CpuInt8Features:
    """What the CPU offers for 8-bit integer dot products."""

    machine: str  # platform.machine(): x86_64, aarch64, ...
    flags: frozenset[str]

    @property
    def vnni(self) -> bool:
        return any(flag in self.flags for flag in VNNI_FLAGS)

    @property
    def is_x86(self) -> bool:
        return self.machine.lower() in ("x86_64", "amd64", "i686", "x86")

    def describe(self) -> str:
        found = [flag for flag in (*VNNI_FLAGS, "amx_tile", "avx512f", "avx2", "asimddp") if flag in self.flags]
        return f"{self.machine}: {', '.join(found) or 'no INT8 dot-product extensions'}"


def read_cpu_features(cpuinfo: Path = Path("/proc/cpuinfo"), machine: str | None = None) -> CpuInt8Features:
    """Flags of the first processor in /proc/cpuinfo (``flags`` on x86, ``Features`` on Arm)."""
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags.update(value.split())
                break
    except OSError:
        pass
    return CpuInt8Features(machine or platform.machine(), frozenset(flags))


@dataclass(frozen=True)
class Int8Scheme:
    """Activation and weight types and whether weights use 7 bits; ``reason`` goes into the report."""

    activation_type: QuantType
    weight_type: QuantType
    reduce_range: bool
    symmetric_activations: bool
    reason: str

    @property
    def name(self) -> str:
        act = "U8" if self.activation_type == QuantType.QUInt8 else "S8"
        wgt = "U8" if self.weight_type == QuantType.QUInt8 else "S8"
        return f"{act}{wgt}" + (" reduce_range" if self.reduce_range else "")


def choose_int8_scheme(
    features: CpuInt8Features, for_tensorrt: bool = False, override: str = "auto", reduce_range: bool | None = None
) -> Int8Scheme:
    """The scheme for ``features`` (or TensorRT); ``override`` ("u8s8"/"s8s8") and ``reduce_range``
    replace the automatic choice when given."""
    if for_tensorrt:
        if override not in ("auto", "s8s8"):
            raise ValueError(f"TensorRT takes only symmetric S8S8 INT8, not {override.upper()}")
        return Int8Scheme(
            QuantType.QInt8, QuantType.QInt8, False, True, "TensorRT: symmetric signed INT8 activations and weights"
        )
    if override == "auto":
        if features.is_x86:
            kind, reason = (
                "u8s8",
                (
                    "VNNI present: U8S8 is the native x86 INT8 product"
                    if features.vnni
                    else "no VNNI: U8S8 with 7-bit weights avoids vpmaddubsw saturation"
                ),
            )
        else:
            kind, reason = "s8s8", f"{features.machine}: signed dot products (S8S8)"
    elif override in ("u8s8", "s8s8"):
        kind, reason = override, f"{override.upper()} as requested"
    else:
        raise ValueError(f"unknown INT8 scheme '{override}' (auto, u8s8, s8s8)")
    if reduce_range is None:
        reduce_range = features.is_x86 and not features.vnni
    activation = QuantType.QUInt8 if kind == "u8s8" else QuantType.QInt8
    return Int8Scheme(activation, QuantType.QInt8, reduce_range, False, reason)
