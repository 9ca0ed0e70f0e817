"""The start-up table and ready line: every model version with its state and reason, every port."""

from __future__ import annotations

from ferry.startup_report import model_table, ready_line


def test_table_has_a_row_per_version_with_reasons() -> None:
    table = model_table(
        [
            {"name": "digits", "version": "1", "state": "READY", "reason": ""},
            {"name": "digits", "version": "2", "state": "READY", "reason": ""},
            {"name": "broken", "version": "", "state": "UNAVAILABLE", "reason": "config.pbtxt:3:1: unknown field"},
        ]
    )
    lines = table.splitlines()
    assert lines[1].split("|")[1:-1] == [" Model  ", " Version ", " State       ", " Reason                          "]
    assert "| digits | 2       | READY       |" in table
    assert "| broken | -       | UNAVAILABLE | config.pbtxt:3:1: unknown field |" in table
    assert len({len(line) for line in lines}) == 1  # a rectangle


def test_empty_repository_says_so() -> None:
    assert "(no models)" in model_table([])


def test_ready_line_names_all_three_ports_and_disabled_ones() -> None:
    assert ready_line("0.0.0.0", 8000, 8001, 8002) == (
        "ferry ready: REST 0.0.0.0:8000, gRPC 0.0.0.0:8001, metrics 0.0.0.0:8002"
    )
    assert ready_line("127.0.0.1", 8000, 0, 0) == "ferry ready: REST 127.0.0.1:8000, gRPC off, metrics off"
