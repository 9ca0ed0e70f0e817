"""Fixtures of the integration tests: counting the cases the fuzz tests generate, shown in the summary."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

_COUNTS = pytest.StashKey["FuzzCounts"]()


class FuzzCounts:
    """Generated cases per fuzzer, per operation and per answer (status code or gRPC code)."""

    def __init__(self) -> None:
        self.by_fuzzer: dict[str, Counter] = defaultdict(Counter)
        self.operations: dict[str, set[str]] = defaultdict(set)

    def add(self, fuzzer: str, operation: str, answer: int | str) -> None:
        self.by_fuzzer[fuzzer][str(answer)] += 1
        self.operations[fuzzer].add(operation)

    def total(self, fuzzer: str) -> int:
        return sum(self.by_fuzzer[fuzzer].values())

    def lines(self) -> list[str]:
        return [
            f"{fuzzer}: {self.total(fuzzer)} generated cases over {len(self.operations[fuzzer])} operations; "
            f"answers {dict(sorted(answers.items()))}"
            for fuzzer, answers in sorted(self.by_fuzzer.items())
        ]


@pytest.fixture(scope="session")
def fuzz_counts(request: pytest.FixtureRequest) -> FuzzCounts:
    return request.config.stash.setdefault(_COUNTS, FuzzCounts())


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    counts = config.stash.get(_COUNTS, None)
    if counts is not None and counts.by_fuzzer:
        terminalreporter.section("fuzzing")
        for line in counts.lines():
            terminalreporter.write_line(line)
