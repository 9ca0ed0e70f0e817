"""A serving configuration to try: the knobs the tuner turns, and the model config they make.

A candidate is a small frozen value, so the search can compare, sort and remember candidates
without touching protobuf; ``apply`` turns it into the config the server loads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ferry_client.protocol import model_config_pb2 as mc

from ..backends.base import config_parameter

THREADS_PARAMETER = "intra_op_thread_count"
_GROUP = mc.ModelInstanceGroup


@dataclass(frozen=True)
class Candidate:
    """One configuration of one model (``model`` names a precision variant when it is not the original)."""

    model: str
    precision: str = "as is"
    max_batch_size: int = 0
    dynamic: bool = False
    preferred: tuple[int, ...] = ()
    delay_us: int = 0
    instances: int = 1  # per device for GPU instances
    threads: int = 0  # ONNX Runtime intra-op threads per instance (CPU); 0: as the config leaves it
    kind: str = "CPU"
    image_workers: int = 0  # the server's image pre-processing threads (FERRY_IMAGE_WORKERS); 0: its default
    current: bool = False  # the model's config as it is on disk, untouched

    @property
    def cores(self) -> int:
        """CPU cores the instances may keep busy: the first tie-breaker (fewer is better)."""
        return self.instances * max(1, self.threads) if self.kind == "CPU" else self.instances

    def resources(self) -> tuple[int, int, int, int, int, bool]:
        """Sort key toward fewer resources: cores, instances, queue delay, batch size, image threads, and
        last the original model over a precision variant (one model fewer to build and keep)."""
        workers = self.image_workers or os.cpu_count() or 1
        return (self.cores, self.instances, self.delay_us, self.max_batch_size, workers, self.precision != "as is")

    def label(self) -> str:
        parts = [] if self.precision == "as is" else [self.precision]
        if self.dynamic:
            batching = f"batch<={self.max_batch_size} delay {self.delay_us}us"
            if self.preferred:
                batching += f" pref {','.join(str(p) for p in self.preferred)}"
            parts.append(batching)
        elif self.max_batch_size:
            parts.append(f"no dyn. batching (max {self.max_batch_size})")
        elif not self.current:
            parts.append("no batching")
        parts.append(f"{self.instances}x{self.kind}" + (f" {self.threads} thr" if self.threads else ""))
        if self.image_workers:
            parts.append(f"{self.image_workers} image thr")
        return ("current: " if self.current else "") + ", ".join(parts)

    def with_(self, **changes: object) -> Candidate:
        """A copy with some knobs changed; never the current config any more."""
        return replace(self, current=False, **changes)  # type: ignore[arg-type]

    def apply(self, config: mc.ModelConfig) -> mc.ModelConfig:
        """The config that loads this candidate, built from the model's own ``config``."""
        result = mc.ModelConfig.FromString(config.SerializeToString())
        if self.current:
            return result
        result.name = self.model
        result.max_batch_size = self.max_batch_size
        if self.dynamic:
            batching = result.dynamic_batching  # keeps queue policies and priorities of the original
            batching.ClearField("preferred_batch_size")
            batching.preferred_batch_size.extend(self.preferred)
            batching.max_queue_delay_microseconds = self.delay_us
        else:
            result.ClearField("dynamic_batching")
        gpus = sorted({g for group in config.instance_group for g in group.gpus})
        result.ClearField("instance_group")
        group = result.instance_group.add(count=self.instances, kind=getattr(_GROUP, f"KIND_{self.kind}"))
        if self.kind == "GPU" and gpus:
            group.gpus.extend(gpus)
        pinned = THREADS_PARAMETER in config.parameters
        if self.kind == "CPU" and self.threads and (pinned or self.threads != default_threads(self.instances)):
            result.parameters[THREADS_PARAMETER].string_value = str(self.threads)
        return result


def default_threads(cpu_instances: int) -> int:
    """Intra-op threads the server gives each CPU instance when the config names none."""
    return max(1, (os.cpu_count() or 1) // max(1, cpu_instances))


def current_candidate(config: mc.ModelConfig, onnx: bool = True) -> Candidate:
    """The model's config as it stands, described in the candidate's terms (for the table).

    Thread counts are an ONNX Runtime setting: other engines' candidates carry 0."""
    groups = list(config.instance_group) or [_GROUP(kind=_GROUP.KIND_CPU, count=1)]
    gpu = any(g.kind == _GROUP.KIND_GPU for g in groups)
    instances = sum(max(1, g.count) for g in groups)
    if gpu:
        devices = max(1, len({d for g in groups for d in g.gpus}))
        instances = max(1, instances // devices)
    threads_text = config_parameter(config, THREADS_PARAMETER)
    cpu_instances = 0 if gpu else instances
    threads = int(threads_text) if threads_text else default_threads(cpu_instances)
    batching = config.dynamic_batching
    return Candidate(
        model=config.name,
        max_batch_size=config.max_batch_size,
        dynamic=config.HasField("dynamic_batching"),
        preferred=tuple(batching.preferred_batch_size),
        delay_us=batching.max_queue_delay_microseconds,
        instances=instances,
        threads=threads if onnx and not gpu else 0,
        kind="GPU" if gpu else "CPU",
        current=True,
    )


def batch_sizes(current: int, largest: int) -> list[int]:
    """Powers of two from 2 up to ``largest``, plus the current size: the coarse batch-size grid."""
    sizes = {current} if current > 1 else set()
    size = 2
    while size <= largest:
        sizes.add(size)
        size *= 2
    return sorted(s for s in sizes if s <= max(largest, current))


def cpu_layouts(cores: int, threads: bool = True) -> list[tuple[int, int]]:
    """(instances, threads per instance) that use the cores: 1 x all, 2 x half, ... and 1 x 1;
    without ``threads`` (engines other than ONNX Runtime) instance counts alone, threads 0."""
    layouts = {(1, 1)} if threads else set()
    instances = 1
    while instances <= cores:
        layouts.add((instances, max(1, cores // instances) if threads else 0))
        instances *= 2
    return sorted(layouts)


def client_changes(current: Candidate, candidate: Candidate) -> list[str]:
    """What serving ``candidate`` instead of ``current`` changes for clients, in words ([]: nothing).

    max_batch_size is the largest batch a client may send as well as the batcher's limit, the queue
    delay is time a request may wait, and a precision variant answers with other numbers."""
    changes = []
    before, after = current.max_batch_size, candidate.max_batch_size
    if before > 0 and after != before:
        if after < before:
            changes.append(f"max_batch_size {before} -> {after}: a client batch larger than {after} is refused (400)")
        else:
            changes.append(f"max_batch_size {before} -> {after}: clients may send batches of up to {after}")
    delay = candidate.delay_us if candidate.dynamic else 0
    if delay and delay != (current.delay_us if current.dynamic else 0):
        changes.append(f"max_queue_delay {delay} us: a request may wait up to {delay / 1000:g} ms for batch-mates")
    if candidate.precision != "as is":
        changes.append(
            f"answers come from the {candidate.precision} model '{candidate.model}' (outputs differ a little "
            "from the original's; its agreement is in the notes)"
        )
    return changes


def client_summary(current: Candidate, candidate: Candidate) -> str:
    """``client_changes`` in a few words, for the table's column."""
    parts = []
    before, after = current.max_batch_size, candidate.max_batch_size
    if before > 0 and after != before:
        parts.append(f"max batch {before}->{after}" + (" (narrower)" if after < before else ""))
    delay = candidate.delay_us if candidate.dynamic else 0
    if delay and delay != (current.delay_us if current.dynamic else 0):
        parts.append(f"waits <={delay / 1000:g} ms")
    if candidate.precision != "as is":
        parts.append(f"{candidate.precision} answers")
    return ", ".join(parts) or "same"
