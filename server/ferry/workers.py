"""The thread pools that run a request's CPU work off the event loop: named, sized from the
settings, shut down when the process stops.

- ``image`` (threads ``ferry-image``, ``--image-workers``, one per usable core by default):
  images decoded and pre-processed, post-stages but the cheap ones (box decoding and NMS, CTC;
  top-k and pooling take microseconds and stay on the loop: ``PostStage.cheap``),
  the OCR model's page steps (crops, turns, reading order), many images' headers read.
- ``codec`` (threads ``ferry-codec``, one per usable core): protocol work too large for the loop:
  messages parsed and answers encoded, bodies inflated (by half its threads at most),
  shared-memory regions copied.
- Each model instance runs on a long-lived thread of its own (``ferry-model-<name>_<n>``:
  ``scheduling.instance_thread``), which the scheduler's ``stop`` ends.

Model loads and unloads, heap trims, closing a peer's connections and opening a CUDA region's IPC
handle at its registration are not per request: they use asyncio's default executor. A Python
model's ``async_exec`` does too: its thread waits for the server's loop, and must never wait on a
pool the request's own work needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

from .cores import usable_cores

T = TypeVar("T")


class Workers:
    """One process's pools (the model process's, or an intake's: ``prefix`` tells them apart)."""

    def __init__(self, image_workers: int = 0, prefix: str = "ferry") -> None:
        cores = usable_cores()
        size = image_workers or cores  # ferry tune measures other sizes
        self.image = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"{prefix}-image")
        #: pool tasks one request's images may occupy at once (the rest of the pool serves others)
        self.image_share = max(1, size // 2)
        self.codec = ThreadPoolExecutor(max_workers=cores, thread_name_prefix=f"{prefix}-codec")
        #: codec threads request bodies may occupy inflating at once (a burst of gzip bombs waits
        #: its turn instead of taking every core from the event loop)
        self.inflating = asyncio.Semaphore(max(1, cores // 2))

    def shutdown(self) -> None:
        """Stop the pools: work not started is dropped, a thread still running is not waited for
        (the process is stopping; every request has been answered or cut off)."""
        for pool in (self.image, self.codec):
            pool.shutdown(wait=False, cancel_futures=True)


async def run_in(pool: Executor, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on ``pool``: ``asyncio.to_thread`` for a named pool."""
    return await asyncio.get_running_loop().run_in_executor(pool, function, *args)
