"""Which configurations to measure, within the time budget, and which one wins.

Coarse to fine: the largest batch size is doubled while throughput keeps improving, then the
queue delay grows while that helps, then sizes between the powers of two and a preferred batch
size are tried, then instance layouts, precision variants and image pre-processing pool sizes
of the best so far. A walk stops when a step breaks the latency constraint, or when
``patience`` + 1 steps in a row do not improve on the best by ``min_gain`` (one slow step on a
busy machine does not end a walk). Finally the best few and the current config are measured
again, interleaved, for ``rounds`` rounds (more while the budget lasts, up to three times as
many), and the winner must beat the current config by more than the rounds' spread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .candidates import Candidate, batch_sizes
from .objective import Objective, Sample, Summary, summarise

Measure = Callable[[Candidate], Sample]
DEFAULT_DELAYS_US = (100, 500, 2000)
#: Time left after the exploration buys more final rounds, up to this many times ``rounds``.
EXTRA_ROUNDS_FACTOR = 3


@dataclass(frozen=True)
class Space:
    """The knobs this model and machine allow."""

    current: Candidate
    largest_batch: int = 0  # 0: the model has no batch dimension, so batching knobs are not tried
    #: max_batch_size is also the largest batch a client may send: never below this (the model's own,
    #: unless --allow-smaller-max-batch)
    smallest_batch: int = 0
    delays_us: tuple[int, ...] = DEFAULT_DELAYS_US
    layouts: tuple[tuple[int, int], ...] = ()  # (instances, threads per instance; 0 for GPU)
    kind: str = "CPU"
    variants: tuple[tuple[str, str], ...] = ()  # (model name, precision) that passed the accuracy gate
    image_workers: tuple[int, ...] = ()  # pre-processing pool sizes to try (image models sent images)


@dataclass
class Outcome:
    summaries: dict[Candidate, Summary]
    samples: dict[Candidate, list[Sample]]
    current: Candidate
    winner: Candidate | None  # None: the current config is as good as anything measured
    confirmed: list[Candidate]
    seconds: float
    measurements: int
    final_rounds: int = 0
    notes: list[str] = field(default_factory=list)


class Search:
    """Runs the stages against a ``measure`` function (a real server, or a fake in unit tests)."""

    def __init__(
        self,
        space: Space,
        objective: Objective,
        measure: Measure,
        budget_s: float,
        rounds: int = 3,
        shortlist: int = 3,
        min_gain: float = 0.03,
        patience: int = 1,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.space = space
        self.objective = objective
        self._measure = measure
        self.budget_s = budget_s
        self.rounds = max(1, rounds)
        self.shortlist = max(1, shortlist)
        self.min_gain = min_gain
        self.patience = patience
        self._clock = clock
        self._say = say
        self._started = clock()
        self._durations: list[float] = []
        self.samples: dict[Candidate, list[Sample]] = {}
        self.notes: list[str] = []
        self.final_rounds = 0

    # --- time ----------------------------------------------------------------------------------

    def _left(self) -> float:
        return self.budget_s - (self._clock() - self._started)

    def _cost(self) -> float:
        """Seconds one measurement takes (a candidate at every load level, its reload included)."""
        recent = sorted(self._durations[-5:])
        return recent[len(recent) // 2] if recent else 0.0

    def _reserve(self) -> float:
        """Time kept for the final interleaved rounds of the current config and the shortlist so far."""
        contenders = min(self.shortlist, max(1, sum(1 for c in self.samples if not c.current)))
        return (contenders + 1) * self.rounds * self._cost()

    def _afford(self, count: int) -> bool:
        return self._left() - self._reserve() >= count * self._cost()

    # --- measuring -----------------------------------------------------------------------------

    def _sample(self, candidate: Candidate) -> float | None:
        began = self._clock()
        sample = self._measure(candidate)
        self._durations.append(self._clock() - began)
        self.samples.setdefault(candidate, []).append(sample)
        score = self.objective.score(sample)
        shown = "breaks the constraint" if score is None else self.objective.unit(score)
        self._say(f"  {candidate.label()}: {shown}")
        return score

    def summary(self, candidate: Candidate) -> Summary:
        return summarise(self.samples[candidate], self.objective)

    def _leader(self) -> Candidate:
        """The best measured so far (fewer resources first among equal scores)."""
        scored = [(c, self.summary(c).score) for c in self.samples]
        feasible = [(c, s) for c, s in scored if s is not None]
        if not feasible:
            return self.space.current
        return min(feasible, key=lambda item: (-item[1], item[0].resources()))[0]

    def _better(self, score: float, than: float) -> bool:
        return score > than + self.min_gain * abs(than)

    def _walk(self, stage: str, steps: Sequence[Candidate], start: float | None) -> None:
        """Measure ``steps`` in order until ``patience`` + 1 steps in a row fail to improve on the best."""
        best = start
        misses = 0
        for index, candidate in enumerate(steps):
            if candidate in self.samples:
                continue
            if not self._afford(1):
                self.notes.append(f"{stage}: {len(steps) - index} step(s) not measured (time budget)")
                return
            score = self._sample(candidate)
            if score is None and best is not None:
                self._say(f"  {stage}: stopped, the constraint is broken")
                return
            if score is None:  # not there yet (e.g. too few infer/s for --min-throughput): go on
                continue
            if best is not None and not self._better(score, best):
                misses += 1
                if misses > self.patience:
                    self._say(f"  {stage}: stopped, no gain over {self.objective.unit(best)}")
                    return
                continue
            best, misses = score, 0

    def _each(self, stage: str, candidates: Sequence[Candidate]) -> None:
        fresh = [c for c in candidates if c not in self.samples]
        for index, candidate in enumerate(fresh):
            if not self._afford(1):
                self.notes.append(f"{stage}: {len(fresh) - index} candidate(s) not measured (time budget)")
                return
            self._sample(candidate)

    # --- stages --------------------------------------------------------------------------------

    def _batch_stage(self) -> None:
        space = self.space
        base = space.current.with_(dynamic=True, delay_us=0, preferred=())
        sizes = [s for s in batch_sizes(space.smallest_batch, space.largest_batch) if s >= space.smallest_batch]
        self._say("batch size (queue delay 0):")
        self._walk("batch size", [base.with_(max_batch_size=size) for size in sizes], None)
        leader = self._leader()
        if not leader.dynamic:
            return
        self._say("queue delay:")
        start = self.summary(leader).score
        self._walk("queue delay", [leader.with_(delay_us=d) for d in space.delays_us if d > leader.delay_us], start)
        leader = self._leader()
        size = leader.max_batch_size
        between = sorted(
            {
                s
                for s in (size * 3 // 4, size * 3 // 2)
                if max(2, space.smallest_batch) <= s <= space.largest_batch and s not in sizes
            }
        )
        self._say("batch size, finer:")
        finer = [leader.with_(max_batch_size=s) for s in between]
        finer.append(leader.with_(preferred=(size,)))
        self._each("batch size, finer", finer)

    def _layout_stage(self) -> None:
        leader = self._leader()
        layouts = [
            leader.with_(instances=i, threads=t, kind=self.space.kind)
            for i, t in self.space.layouts
            if (i, t) != (leader.instances, leader.threads)
        ]
        if layouts:
            self._say("instances and threads:")
            self._each("instances and threads", sorted(layouts, key=Candidate.resources))

    def _precision_stage(self) -> None:
        if not self.space.variants:
            return
        leader = self._leader()
        self._say("precision:")
        self._each("precision", [leader.with_(model=name, precision=label) for name, label in self.space.variants])

    def _image_stage(self) -> None:
        if not self.space.image_workers:
            return
        leader = self._leader()
        self._say("image pre-processing threads:")
        self._each("image pre-processing threads", [leader.with_(image_workers=n) for n in self.space.image_workers])

    def _confirm(self) -> list[Candidate]:
        ranked = sorted(
            (c for c in self.samples if not c.current and self.summary(c).score is not None),
            key=lambda c: (-(self.summary(c).score or 0.0), c.resources()),
        )
        chosen = [self.space.current, *ranked[: self.shortlist]]
        self._say(f"final: {len(chosen)} candidate(s), {self.rounds} or more interleaved round(s)")
        round_index = 0
        while round_index < self.rounds or (
            round_index < EXTRA_ROUNDS_FACTOR * self.rounds and self._left() >= len(chosen) * self._cost()
        ):
            shift = round_index % len(chosen)
            for candidate in chosen[shift:] + chosen[:shift]:
                self._sample(candidate)
            round_index += 1
        self.final_rounds = round_index
        return chosen

    def run(self) -> Outcome:
        current = self.space.current
        self._say("current config:")
        self._sample(current)
        if self.space.largest_batch > 1:
            self._batch_stage()
        self._layout_stage()
        self._precision_stage()
        self._image_stage()
        confirmed = self._confirm()
        return Outcome(
            summaries={c: self.summary(c) for c in self.samples},
            samples=self.samples,
            current=current,
            winner=choose_winner(confirmed, {c: self.summary(c) for c in confirmed}),
            confirmed=confirmed,
            seconds=self._clock() - self._started,
            measurements=sum(len(s) for s in self.samples.values()),
            final_rounds=self.final_rounds,
            notes=self.notes,
        )


def choose_winner(candidates: Sequence[Candidate], summaries: dict[Candidate, Summary]) -> Candidate | None:
    """The candidate that beats the current config beyond the spread, fewest resources among those
    that tie with the best of them; None when nothing beats the current config."""
    current = next(c for c in candidates if c.current)
    beating = [c for c in candidates if not c.current and summaries[c].beats(summaries[current])]
    if not beating:
        return None
    best = max(beating, key=lambda c: summaries[c].score or 0.0)
    tied = [c for c in beating if summaries[c].ties(summaries[best])]
    return min(tied, key=Candidate.resources)
