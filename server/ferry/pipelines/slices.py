"""Image preparation in small slices on a shared pool: fair between requests, stoppable.

One task per request would let a request of hundreds of large images occupy the whole pool while
others wait, and keep decoding after its caller left. Here a request has at most ``share`` slices
in the pool at once; the pool's FIFO queue therefore alternates between requests, and a cancelled
caller submits no further slice (the one running finishes; threads cannot be interrupted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..batches import execution_slices
from .device_pixels import DevicePixels
from .runtime import ImagePipeline, Prepared

#: Images per pool task: small enough to interleave requests, large enough to amortise the hand-off.
IMAGES_PER_SLICE = 2


@dataclass
class ImageWork:
    """Images waiting for or in the pool, and images decoded so far (exported as metrics)."""

    waiting: int = 0
    decoded: int = 0


async def prepare_in_slices(
    pool: Executor,
    share: int,
    pipeline: ImagePipeline,
    images: Sequence[bytes | np.ndarray],
    work: ImageWork | None = None,
    on_device: bool = False,
) -> Prepared:
    """``pipeline.prepare(images)`` run as slices on ``pool``, at most ``share`` at a time; with
    ``on_device`` a device pre-processor's slices stay on its device and are joined there."""
    loop = asyncio.get_running_loop()
    slices = execution_slices(len(images), IMAGES_PER_SLICE) or [slice(0, 0)]
    limiter = asyncio.Semaphore(share)
    counts = work or ImageWork()

    async def one(part: slice) -> Prepared:
        chunk = list(images[part])
        counts.waiting += len(chunk)
        try:
            async with limiter:
                prepared = await loop.run_in_executor(pool, pipeline.prepare, chunk, part.start, on_device)
        finally:
            counts.waiting -= len(chunk)
        counts.decoded += len(chunk)
        return prepared

    tasks = [asyncio.ensure_future(one(part)) for part in slices]
    try:
        parts = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    if len(parts) == 1:
        return parts[0]
    batch: Any
    batches: list[Any] = [part.batch for part in parts]
    if isinstance(batches[0], list):
        batch = [tensor for part in batches for tensor in part]
    elif isinstance(batches[0], np.ndarray):
        batch = np.concatenate(batches)
    elif isinstance(batches[0], DevicePixels):  # pre-processed by the batcher, once per batch
        batch = DevicePixels.joined(batches)
    else:  # device tensors (``on_device``)
        from ..gpu import device_tensors

        batch = device_tensors.join(batches)
    return Prepared(
        batch,
        [transform for part in parts for transform in part.transforms],
        sum(part.decode_ns for part in parts),
        sum(part.preprocess_ns for part in parts),
    )


class ImageCounts(Protocol):
    """What the metrics read: an ``ImageWork``, or the sum of several processes' pools."""

    @property
    def waiting(self) -> int: ...

    @property
    def decoded(self) -> int: ...


class ImageWorkCollector(Collector):
    """``ferry_image_waiting`` and ``ferry_image_decoded_total``: what the decode pools hold and did."""

    def __init__(self, work: ImageCounts) -> None:
        self._work = work

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ferry_image_waiting", "Images queued for or decoding in the image pool", value=self._work.waiting
        )
        yield CounterMetricFamily(
            "ferry_image_decoded", "Images decoded and pre-processed by the image pool", value=self._work.decoded
        )
