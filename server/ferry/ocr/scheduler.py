"""The OCR model's scheduler: each page through the detector, the angle classifier and the
recogniser, each by that model's own scheduler, with the CPU steps in worker threads.

Pages of concurrent requests meet in the composing models' batchers: the angle batches (all
48x192) and the recognition batches of equal width (most lines are 320 wide) run together
when the models enable dynamic batching. Offers the same ``submit`` as every scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import numpy as np

from ..ensembles.step import StepModel
from ..errors import FerryError, InvalidArgument, Unavailable
from ..response_streams import ResponseSink
from ..scheduling.interface import ModelScheduler, RequestTiming
from ..scheduling.timeline import Timeline
from ..statistics import ModelStats
from . import steps
from .settings import INPUT, OcrSettings

Outputs = dict[str, np.ndarray]
Resolve = Callable[[str, str], StepModel]


class OcrScheduler(ModelScheduler):
    """Runs OCR requests (one encoded page each) over three composing models."""

    def __init__(self, name: str, settings: OcrSettings, resolve: Resolve, stats: ModelStats, max_pixels: int) -> None:
        self.name = name
        self.settings = settings
        self.stats = stats
        self.max_pixels = max_pixels
        self._resolve = resolve
        self._closing = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def queue_size(self) -> int:
        return 0  # pages wait in the composing models' queues

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def closing(self) -> bool:
        return self._closing

    def start(self) -> None:
        """Nothing to start: the composing models' schedulers do the work."""

    async def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait (up to ``timeout``) for those running to finish."""
        self._closing = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    def hurry(self) -> None:
        """Nothing waits here: the composing models' batchers are hurried themselves."""

    def models(self) -> tuple[StepModel, StepModel, StepModel]:
        """The READY detector, angle classifier and recogniser."""
        found = []
        for role in ("detector", "angle_classifier", "recognizer"):
            name = getattr(self.settings, role)
            try:
                found.append(self._resolve(name, ""))
            except FerryError as exc:
                raise Unavailable(f"model '{self.name}': its {role} '{name}' is not ready: {exc.message}") from None
        return found[0], found[1], found[2]

    def unready_reason(self) -> str:
        try:
            self.models()
        except FerryError as exc:
            return exc.message
        return ""

    async def submit(
        self,
        inputs: Outputs,
        outputs: list[str],
        batch_size: int = 1,
        priority: int | None = None,
        timeout_us: int | None = None,
        timeline: Timeline | None = None,
        timing: RequestTiming | None = None,
        sink: ResponseSink | None = None,
    ) -> Outputs:
        """OCR of the one page in ``inputs['IMAGE']``: its lines' boxes, text and scores."""
        if self._closing:
            raise Unavailable(f"model '{self.name}' is unloading")
        pages = np.asarray(inputs[INPUT]).reshape(-1)
        if pages.size != 1:
            raise InvalidArgument(f"model '{self.name}' reads one page per request, got {pages.size}")
        data = pages[0]
        if not isinstance(data, bytes | bytearray | memoryview | np.bytes_):
            raise InvalidArgument(f"model '{self.name}': input '{INPUT}' must hold an encoded image (BYTES)")
        started = time.perf_counter_ns()
        spent = RequestTiming()
        self._in_flight += 1
        self._idle.clear()
        try:
            result = await self._run(bytes(data), priority, timeout_us, spent)
        except asyncio.CancelledError:
            self.stats.record_failure(time.perf_counter_ns() - started, "CANCELED")
            raise
        except FerryError as exc:
            reason = "REJECTED" if isinstance(exc, Unavailable) else "BACKEND"
            self.stats.record_failure(time.perf_counter_ns() - started, reason)
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        if timeline is not None:
            timeline.queue_start = timeline.compute_start = timeline.compute_input_end = started
            timeline.compute_output_start = timeline.compute_end = time.perf_counter_ns()
        self.stats.record_success(time.perf_counter_ns() - started, spent.queue_ns)
        self.stats.record_execution(1, 1, spent.compute_input_ns, spent.compute_infer_ns, spent.compute_output_ns)
        if timing is not None:
            timing.queue_ns += spent.queue_ns
            timing.compute_input_ns += spent.compute_input_ns
            timing.compute_infer_ns += spent.compute_infer_ns
            timing.compute_output_ns += spent.compute_output_ns
        return {name: result[name] for name in outputs}

    async def _run(self, data: bytes, priority: int | None, timeout_us: int | None, timing: RequestTiming) -> Outputs:
        detector, angle, recognizer = self.models()
        settings = self.settings
        work = await asyncio.to_thread(steps.start_page, data, settings, self.max_pixels)
        if work.detector_input is None:
            return steps.result(np.zeros((0, 4, 2)), [], [])
        found = await _run_model(detector, work.detector_input, priority, timeout_us, timing)
        angle_batch = await asyncio.to_thread(steps.cut_crops, work, found, settings)
        if angle_batch is None:
            return steps.result(np.zeros((0, 4, 2)), [], [])
        angles = await _run_model(angle, angle_batch, priority, timeout_us, timing)
        batches = await asyncio.to_thread(steps.turn_crops, work, angles, settings)
        recognised = await asyncio.gather(
            *(_run_model(recognizer, tensor, priority, timeout_us, timing) for _, tensor in batches)
        )
        characters = _characters(recognizer)
        finished = [(members, probabilities) for (members, _), probabilities in zip(batches, recognised, strict=True)]
        return await asyncio.to_thread(steps.finish, work, finished, characters, settings)


async def _run_model(
    model: StepModel, batch: np.ndarray, priority: int | None, timeout_us: int | None, timing: RequestTiming
) -> np.ndarray:
    """The model's one output for ``batch`` (first axis: items), through its scheduler in chunks
    of its ``max_batch_size`` (one item at a time for a model that cannot batch)."""
    scheduler = model.scheduler
    if scheduler is None:
        raise Unavailable(f"model '{model.name}' has no scheduler")
    [input_name] = model.inputs
    [output_name] = model.outputs
    if model.max_batch_size <= 0:
        parts = [
            await scheduler.submit({input_name: item[None]}, [output_name], 1, priority, timeout_us, timing=timing)
            for item in batch
        ]
        return np.concatenate([part[output_name] for part in parts])
    chunk = model.max_batch_size
    parts = await asyncio.gather(
        *(
            scheduler.submit(
                {input_name: batch[start : start + chunk]},
                [output_name],
                len(batch[start : start + chunk]),
                priority,
                timeout_us,
                timing=timing,
            )
            for start in range(0, len(batch), chunk)
        )
    )
    return np.concatenate([part[output_name] for part in parts])


def _characters(recognizer: StepModel) -> list[str]:
    """The recogniser's classes: its dictionary (``label_filename`` of its output) between the
    blank and the space PaddleOCR adds."""
    labels = getattr(recognizer, "labels", {}) or {}
    [output_name] = recognizer.outputs
    dictionary = labels.get(output_name)
    if not dictionary:
        raise FerryError(
            f"recogniser '{recognizer.name}' has no dictionary: set label_filename on output '{output_name}'"
        )
    from ..pipelines.text.ctc import ctc_characters

    return ctc_characters(dictionary)
