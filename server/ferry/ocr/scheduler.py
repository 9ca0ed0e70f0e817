"""The OCR model's scheduler: each page through the detector, the angle classifier and the
recogniser, each resolved once per page and run as a request of its own through the request path
(the ``StepPath``: validated, traced, split to the model's batch size, retried once on a
replaced version), with the CPU steps on the image pool.

Pages of concurrent requests meet in the composing models' batchers: the angle batches (all
48x192) and the recognition batches of equal width (most lines are 320 wide) run together
when the models enable dynamic batching. Offers the same ``submit`` as every scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import Executor

import numpy as np

from ..batches import execution_slices
from ..ensembles.step import ComposingModels, StepModel, StepPath, StepRequest
from ..errors import FerryError, InvalidArgument, Unavailable
from ..pipelines.text.ctc import ctc_characters, ctc_greedy
from ..scheduling.interface import ComposingScheduler, Execution, RequestTiming
from ..statistics import ModelStats
from ..types import Reserves
from ..workers import run_in
from . import steps
from .settings import INPUT, OcrSettings

Outputs = dict[str, np.ndarray]


class OcrScheduler(ComposingScheduler):
    """Runs OCR requests (one encoded page each) over three composing models."""

    def __init__(
        self,
        name: str,
        settings: OcrSettings,
        models: ComposingModels,
        stats: ModelStats,
        max_pixels: int,
        pool: Executor,
    ) -> None:
        super().__init__(name, stats)
        self.settings = settings
        self.max_pixels = max_pixels
        self.pool = pool  # the image pool (``ferry.workers``): the page steps are image work
        self._models = models

    def models(self) -> tuple[StepModel, StepModel, StepModel]:
        """The READY detector, angle classifier and recogniser."""
        found = []
        for role in ("detector", "angle_classifier", "recognizer"):
            name = getattr(self.settings, role)
            try:
                found.append(self._models.get(name, ""))
            except FerryError as exc:
                raise Unavailable(f"model '{self.name}': its {role} '{name}' is not ready: {exc.message}") from None
        return found[0], found[1], found[2]

    def check_ready(self) -> None:
        self.models()

    async def submit(self, execution: Execution) -> Outputs:
        """OCR of the one page in the execution's ``IMAGE``: its lines' boxes, text and scores. Each
        step takes the execution's priority, timeout, parameters and admission ticket."""
        pages = np.asarray(execution.inputs[INPUT]).reshape(-1)
        if pages.size != 1:
            raise InvalidArgument(f"model '{self.name}' reads one page per request, got {pages.size}")
        data = pages[0]
        if not isinstance(data, bytes | bytearray | memoryview | np.bytes_):
            raise InvalidArgument(f"model '{self.name}': input '{INPUT}' must hold an encoded image (BYTES)")
        started = time.perf_counter_ns()
        spent = RequestTiming()
        result = await self.counted(self._serve_page(bytes(data), execution, spent), started)
        self.record_success(started, spent, 1, execution.timeline, execution.timing)
        return {name: result[name] for name in execution.outputs}

    async def _serve_page(self, data: bytes, execution: Execution, timing: RequestTiming) -> Outputs:
        """The page's stages; what each will hold is counted in the request's admission before it
        is paid: decoding and the detector from the page's header, then the crops, the angle
        batch and the recognition window from the boxes found."""
        detector, angle, recognizer = self.models()
        settings = self.settings
        characters = _characters(recognizer)
        ticket = execution.ticket
        with _counted(ticket, await run_in(self.pool, steps.page_cost, data, settings, self.max_pixels)):
            work = await run_in(self.pool, steps.start_page, data, settings, self.max_pixels)
            if work.detector_input is None:
                return steps.result(np.zeros((0, 4, 2)), [], [])
            found = await _serve_on(self._models.step_path, detector, work.detector_input, execution, timing)
            work.detector_input = None
            text_cost = await run_in(self.pool, steps.find_text, work, found, settings, len(characters))
            del found
        with _counted(ticket, text_cost):
            return await self._read_text(work, angle, recognizer, characters, execution, timing)

    async def _read_text(
        self,
        work: steps.PageWork,
        angle: StepModel,
        recognizer: StepModel,
        characters: list[str],
        execution: Execution,
        timing: RequestTiming,
    ) -> Outputs:
        """The crops of the boxes found, turned upright and recognised, a few batches at a time."""
        settings = self.settings
        angle_batch = await run_in(self.pool, steps.cut_crops, work, settings)
        if angle_batch is None:
            return steps.result(np.zeros((0, 4, 2)), [], [])
        angles = await _serve_on(self._models.step_path, angle, angle_batch, execution, timing)
        batches = await run_in(self.pool, steps.turn_crops, work, angles, settings)
        window = asyncio.Semaphore(steps.RECOGNITION_WINDOW)

        async def read(members: list[int], width: int) -> tuple[list[int], list[tuple[str, float]]]:
            async with window:
                tensor = await run_in(self.pool, steps.recognition_tensor, work, members, width, settings)
                probabilities = await _serve_on(self._models.step_path, recognizer, tensor, execution, timing)
                return members, await run_in(self.pool, ctc_greedy, probabilities, characters)

        read_lines = await asyncio.gather(*(read(members, width) for members, width in batches))
        return await run_in(self.pool, steps.finish, work, read_lines, settings)


@contextlib.contextmanager
def _counted(ticket: Reserves | None, nbytes: int) -> Iterator[None]:
    """Count ``nbytes`` in the request's admission while a stage runs (refused, 503 or 413, when
    they do not fit), and stop counting them once it is over: a page's stages follow each other."""
    if ticket is None:  # not admitted: a Python model's exec()
        yield
        return
    release = ticket.hold(nbytes)
    try:
        yield
    finally:
        release()


async def _serve_on(
    path: StepPath,
    model: StepModel,
    batch: np.ndarray,
    execution: Execution,
    timing: RequestTiming,
) -> np.ndarray:
    """The model's one output for ``batch`` (first axis: items), through the request path: in
    one request when the model batches (the path splits it to ``max_batch_size``), else one
    request per item. The page's ticket goes with each (the execution's): the path counts the step model's working
    memory on it while the step runs."""
    [input_name] = model.inputs
    [output_name] = model.outputs
    # the page's own tensors, bounded by max_detector_pixels and the page's crops
    made = frozenset({input_name})

    def step(inputs: np.ndarray) -> StepRequest:
        return StepRequest(model, "", {input_name: inputs}, [output_name], execution, timing, preprocessed=made)

    if model.max_batch_size > 0:
        return (await path(step(batch)))[output_name]
    parts = [await path(step(batch[one])) for one in execution_slices(len(batch), 0)]
    return np.concatenate([part[output_name] for part in parts])


def _characters(recognizer: StepModel) -> list[str]:
    """The recogniser's classes: its dictionary (``label_filename`` of its output) between the
    blank and the space PaddleOCR adds."""
    labels = recognizer.labels
    [output_name] = recognizer.outputs
    dictionary = labels.get(output_name)
    if not dictionary:
        raise FerryError(
            f"recogniser '{recognizer.name}' has no dictionary: set label_filename on output '{output_name}'"
        )
    return ctc_characters(dictionary)
