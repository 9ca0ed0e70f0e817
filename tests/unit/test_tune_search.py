"""``ferry tune``'s search and judging rules, with a made-up measurement function (no server).

The fake ``measure`` returns throughput from a formula of the candidate's knobs, so each test
knows which candidate must win; a fake clock makes the time budget exact.
"""

from __future__ import annotations

import math

import pytest

from ferry.tune.candidates import (
    Candidate,
    batch_sizes,
    client_changes,
    client_summary,
    cpu_layouts,
    current_candidate,
)
from ferry.tune.objective import Objective, Point, Sample, Summary, parse_latency_budget, summarise
from ferry.tune.report import table, verdict
from ferry.tune.search import Outcome, Search, Space, choose_winner
from ferry_client.protocol import model_config_pb2 as mc

CURRENT = Candidate(model="m", max_batch_size=8, instances=1, threads=2, current=True)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def point(throughput: float, p99_ms: float = 5.0, load: float = 8, failures: int = 0) -> Point:
    return Point(load, throughput, {50: p99_ms / 2, 95: p99_ms * 0.9, 99: p99_ms}, failures)


class FakeMeasure:
    """Throughput grows with batch size up to ``best_batch``, then falls; each call costs 1 s."""

    def __init__(self, clock: FakeClock, best_batch: int = 8, noise: float = 0.0, p99_per_batch: float = 1.0) -> None:
        self.clock = clock
        self.best_batch = best_batch
        self.noise = noise
        self.p99_per_batch = p99_per_batch
        self.calls: list[Candidate] = []

    def throughput(self, c: Candidate) -> float:
        if not c.dynamic:
            return 100.0
        size = c.max_batch_size
        base = 100.0 * min(size, self.best_batch) - 20.0 * max(0, size - self.best_batch)
        return base * (1.2 if c.precision == "INT8" else 1.0) * (1.1 if c.instances == 2 else 1.0)

    def __call__(self, c: Candidate) -> Sample:
        self.clock.now += 1.0
        self.calls.append(c)
        wobble = self.noise * (1 if len(self.calls) % 2 else -1)
        batch = c.max_batch_size if c.dynamic else 1
        return (point(self.throughput(c) * (1 + wobble), p99_ms=2.0 + self.p99_per_batch * batch),)


THROUGHPUT = Objective()


def search(measure: FakeMeasure, clock: FakeClock, objective: Objective = THROUGHPUT, **space: object) -> Search:
    settings = {"current": CURRENT, "largest_batch": 32, "layouts": ((1, 2), (2, 1), (1, 1))}
    settings.update(space)
    return Search(Space(**settings), objective, measure, budget_s=200, rounds=3, clock=clock)  # type: ignore[arg-type]


def test_batch_walk_stops_after_throughput_stops_improving() -> None:
    clock = FakeClock()
    measure = FakeMeasure(clock, best_batch=4)
    outcome = search(measure, clock).run()
    walked = [c.max_batch_size for c in measure.calls if c.dynamic and c.delay_us == 0 and not c.preferred]
    # 2, 4 improve; 8 and 16 do not (patience 1), so 32 is never measured
    assert walked[:4] == [2, 4, 8, 16] and 32 not in walked
    assert outcome.winner is not None and outcome.winner.max_batch_size == 4 and outcome.winner.dynamic


def test_winner_beats_the_current_config_and_says_by_how_much() -> None:
    clock = FakeClock()
    outcome = search(FakeMeasure(clock, best_batch=8), clock).run()
    winner = outcome.winner
    assert winner is not None and winner.max_batch_size == 8
    assert outcome.summaries[winner].score == pytest.approx(880.0)  # 2 instances x 1 thread: +10%
    assert outcome.summaries[outcome.current].score == pytest.approx(100.0)
    assert outcome.measurements == sum(len(s) for s in outcome.samples.values())
    # the current config and the shortlist were measured again, interleaved: the first sample + the final
    # rounds, 3 and then more while the budget lasted, up to 9
    assert outcome.final_rounds == 9 and len(outcome.samples[outcome.current]) == 10


def test_ties_go_to_fewer_resources() -> None:
    clock = FakeClock()

    class SameForLayouts(FakeMeasure):
        def throughput(self, c: Candidate) -> float:
            return super().throughput(c.with_(instances=1))  # instances change nothing

    outcome = search(SameForLayouts(clock, best_batch=8), clock).run()
    assert outcome.winner is not None
    assert outcome.winner.cores == 1  # 1 instance x 1 thread measures the same as 1 x 2 and 2 x 1


def test_latency_budget_excludes_candidates_that_break_it() -> None:
    clock = FakeClock()
    # p99 = 2 + 3 ms per batched request: batch 4 -> 14 ms fits a 15 ms budget, batch 8 -> 26 ms does not
    measure = FakeMeasure(clock, best_batch=32, p99_per_batch=3.0)
    outcome = search(measure, clock, Objective(99, 15.0)).run()
    assert outcome.winner is not None and outcome.winner.max_batch_size == 4
    assert all(s.score is None for c, s in outcome.summaries.items() if c.dynamic and c.max_batch_size >= 8)
    walked = [c.max_batch_size for c in measure.calls if c.dynamic and c.delay_us == 0 and not c.preferred]
    assert 16 not in walked  # the walk stopped at the first step that broke the budget


def test_min_throughput_objective_picks_the_lowest_latency_that_keeps_up() -> None:
    clock = FakeClock()
    # lowest p99 among candidates with >= 350 infer/s: batch 4 (400/s, p99 6 ms) beats larger batches
    outcome = search(FakeMeasure(clock, best_batch=32), clock, Objective(99, None, 350.0)).run()
    assert outcome.winner is not None and outcome.winner.max_batch_size == 4


def test_noise_larger_than_the_gain_keeps_the_current_config() -> None:
    current = Summary((point(100.0),), 100.0, 15.0)
    slightly_better = Summary((point(120.0),), 120.0, 10.0)
    challenger = CURRENT.with_(dynamic=True)
    assert choose_winner([CURRENT, challenger], {CURRENT: current, challenger: slightly_better}) is None
    clearly_better = Summary((point(200.0),), 200.0, 10.0)
    assert choose_winner([CURRENT, challenger], {CURRENT: current, challenger: clearly_better}) == challenger


def test_a_noisy_search_never_declares_a_winner_inside_the_spread() -> None:
    clock = FakeClock()

    class Flat(FakeMeasure):
        def throughput(self, c: Candidate) -> float:
            return 100.0  # nothing helps; only +-20% noise differs

    outcome = search(Flat(clock, noise=0.2), clock).run()
    assert outcome.winner is None


def test_time_budget_is_respected_and_skipped_steps_are_reported() -> None:
    clock = FakeClock()
    measure = FakeMeasure(clock, best_batch=32)
    s = Search(
        Space(CURRENT, largest_batch=32, layouts=((1, 2), (2, 1), (1, 1))),
        Objective(),
        measure,
        budget_s=12,
        rounds=2,
        clock=clock,
    )
    outcome = s.run()
    assert outcome.seconds <= 12  # seconds of the FakeClock (1 per measurement): the budget logic, not wall time
    assert any("not measured (time budget)" in note for note in outcome.notes)
    assert outcome.winner is not None  # the final rounds still ran


def test_precision_variants_are_tried_on_the_best_config() -> None:
    clock = FakeClock()
    measure = FakeMeasure(clock, best_batch=8)
    outcome = search(measure, clock, variants=(("m_int8", "INT8"),)).run()
    tried = [c for c in measure.calls if c.model == "m_int8"]
    assert tried and all(c.max_batch_size == 8 and c.dynamic for c in tried)
    assert outcome.winner is not None and outcome.winner.model == "m_int8"


def test_models_without_batch_dimension_only_try_layouts() -> None:
    clock = FakeClock()
    measure = FakeMeasure(clock)
    current = Candidate(model="m", max_batch_size=0, instances=1, threads=2, current=True)
    search(measure, clock, current=current, largest_batch=0).run()
    assert all(c.max_batch_size == 0 and not c.dynamic for c in measure.calls)


def test_objective_scores_and_parses() -> None:
    assert parse_latency_budget("p99=50ms") == (99, 50.0)
    assert parse_latency_budget("p95 = 2s") == (95, 2000.0)
    assert parse_latency_budget("p50=500us") == (50, 0.5)
    for bad in ("p90=5ms", "99=5ms", "p99=", "p99=0ms", "p99=5min"):
        with pytest.raises(ValueError, match="latency-budget"):
            parse_latency_budget(bad)
    objective = Objective(99, 10.0)
    points = (point(100.0, 5.0, load=1), point(300.0, 20.0, load=8))
    assert objective.score(points) == 100.0  # concurrency 8 breaks the budget
    assert objective.score((point(500.0, 5.0, failures=1),)) is None  # failures never count
    samples = [(point(100.0),), (point(140.0),), (point(110.0),)]
    summary = summarise(samples, Objective())
    assert summary.score == 110.0 and summary.spread == 20.0


def test_candidates_make_the_config_they_describe() -> None:
    config = mc.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=8)
    config.dynamic_batching.default_queue_policy.max_queue_size = 7
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    current = current_candidate(config)
    assert current.apply(config) == config  # the current config is loaded untouched
    tuned = current.with_(max_batch_size=16, preferred=(16,), delay_us=300, instances=2, threads=3).apply(config)
    assert tuned.max_batch_size == 16 and list(tuned.dynamic_batching.preferred_batch_size) == [16]
    assert tuned.dynamic_batching.max_queue_delay_microseconds == 300
    assert tuned.dynamic_batching.default_queue_policy.max_queue_size == 7  # the rest of the batcher is kept
    assert [(g.kind, g.count) for g in tuned.instance_group] == [(mc.ModelInstanceGroup.KIND_CPU, 2)]
    assert tuned.parameters["intra_op_thread_count"].string_value == "3"
    unbatched = current.with_(dynamic=False).apply(config)
    assert not unbatched.HasField("dynamic_batching")
    assert batch_sizes(12, 16) == [2, 4, 8, 12, 16]
    assert cpu_layouts(2) == [(1, 1), (1, 2), (2, 1)]
    assert cpu_layouts(4, threads=False) == [(1, 0), (2, 0), (4, 0)]
    assert math.isclose(Candidate("m", instances=2, threads=3).cores, 6)


def test_image_pool_sizes_are_tried_on_the_best_config_and_fewer_threads_win_ties() -> None:
    clock = FakeClock()
    measure = FakeMeasure(clock, best_batch=8)
    outcome = search(measure, clock, image_workers=(1, 64)).run()
    pools = [c for c in measure.calls if c.image_workers]
    assert {c.image_workers for c in pools} == {1, 64} and all(c.max_batch_size == 8 for c in pools)
    # the pool size changes nothing in this fake: a tie, so the fewest threads (1) is recommended
    assert outcome.winner is not None and outcome.winner.image_workers == 1


def test_a_tie_goes_to_the_original_model_over_a_precision_variant() -> None:
    fp32 = CURRENT.with_(dynamic=True)
    int8 = fp32.with_(model="m_int8", precision="INT8")
    summaries = {
        CURRENT: Summary((point(100.0),), 100.0, 5.0),
        int8: Summary((point(300.0),), 300.0, 30.0),  # first and a little higher, but within the spread
        fp32: Summary((point(290.0),), 290.0, 30.0),
    }
    assert choose_winner([CURRENT, int8, fp32], summaries) == fp32


def test_max_batch_size_never_goes_below_the_models_own_unless_allowed() -> None:
    """max_batch_size is what clients may send: batch-1 traffic must not narrow it (64 -> 4 refused 8)."""
    clock = FakeClock()
    measure = FakeMeasure(clock, best_batch=2)  # smaller batches measure best
    outcome = search(measure, clock, smallest_batch=8).run()
    assert all(c.max_batch_size >= 8 for c in measure.calls), sorted({c.max_batch_size for c in measure.calls})
    assert outcome.winner is None or outcome.winner.max_batch_size >= 8
    clock = FakeClock()
    allowed = search(FakeMeasure(clock, best_batch=2), clock).run()  # --allow-smaller-max-batch
    assert allowed.winner is not None and allowed.winner.max_batch_size == 2


def test_what_a_winner_changes_for_clients_is_said() -> None:
    current = Candidate(model="m", max_batch_size=64, current=True)
    narrower = current.with_(max_batch_size=4, dynamic=True, delay_us=2000)
    assert client_changes(current, narrower) == [
        "max_batch_size 64 -> 4: a client batch larger than 4 is refused (400)",
        "max_queue_delay 2000 us: a request may wait up to 2 ms for batch-mates",
    ]
    assert client_summary(current, narrower) == "max batch 64->4 (narrower), waits <=2 ms"
    assert client_summary(current, current.with_(instances=2)) == "same"


def test_the_verdict_quotes_the_spread_the_table_shows() -> None:
    """Each round's best level differs (load 1, then load 8): the spread is the scoring level's, in both."""
    current = CURRENT
    winner = CURRENT.with_(dynamic=True)
    samples = {
        current: [(point(100.0, load=1), point(150.0, load=8)), (point(140.0, load=1), point(120.0, load=8))],
        winner: [(point(300.0, load=8),), (point(340.0, load=8),)],
    }
    summaries = {c: summarise(s, THROUGHPUT) for c, s in samples.items()}
    outcome = Outcome(summaries, samples, current, winner, [current, winner], 1.0, 4, 2)
    rows = table(outcome, "concurrency").splitlines()
    current_row = next(r for r in rows if r.startswith("1=") and "  8  " in r)
    assert "135.0 ±15.0" in current_row and "320.0 ±20.0" in table(outcome, "concurrency")
    recommended = next(line for line in verdict(outcome, THROUGHPUT, "concurrency") if line.startswith("recommended"))
    assert "135.0 infer/s ±15.0" in recommended and "320.0 infer/s ±20.0" in recommended, recommended


def test_the_digits_model_is_tuned_from_its_own_max_batch_size_up() -> None:
    """``ferry tune model_repo/digits`` on batch-1 traffic: the search starts at its max_batch_size, 64."""
    from pathlib import Path

    from ferry.repository.config import read_config_file
    from ferry.tune.command import _space
    from ferry.tune.measure import LoadPlan

    config = read_config_file(Path(__file__).resolve().parents[2] / "model_repo" / "digits")
    assert config is not None and config.max_batch_size == 64
    current = current_candidate(config)
    plan = LoadPlan("concurrency", (1.0,))
    assert _space(config, current, plan, [], [], onnx=True).smallest_batch == 64
    assert _space(config, current, plan, [], [], onnx=True, allow_smaller_batch=True).smallest_batch == 0
