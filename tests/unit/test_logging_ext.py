"""The logging extension: Triton's switches applied to real log handlers."""

from __future__ import annotations

import io
import json
import logging

import pytest

from ferry.api.logging_ext import LoggingControl, LogSettings
from ferry.errors import InvalidArgument


@pytest.fixture
def captured() -> tuple[logging.Logger, io.StringIO]:
    """A private logger tree with one stream handler, so the test never touches pytest's logging."""
    logger = logging.getLogger("ferry-logging-ext-test")
    logger.propagate = False
    logger.handlers.clear()
    stream = io.StringIO()
    logger.addHandler(logging.StreamHandler(stream))
    others = {handler: list(handler.filters) for handler in logging.getLogger().handlers}
    yield logger, stream
    logger.handlers.clear()
    for handler, filters in others.items():  # pytest's capture handlers must not keep our severity filter
        handler.filters[:] = filters


def emit_all(logger: logging.Logger) -> None:
    child = logger.getChild("worker")
    child.debug("d-line")
    child.info("i-line")
    child.warning("w-line")
    child.error("e-line")


def test_defaults_log_info_and_above(captured) -> None:
    logger, stream = captured
    control = LoggingControl(LogSettings(), root=logger)
    emit_all(logger)
    text = stream.getvalue()
    assert "d-line" not in text and all(m in text for m in ("i-line", "w-line", "e-line"))
    assert control.get() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


def test_switches_are_independent_and_verbose_adds_debug(captured) -> None:
    logger, stream = captured
    control = LoggingControl(LogSettings(), root=logger)
    control.update({"log_info": False, "log_warning": False, "log_verbose_level": 1})
    emit_all(logger)
    lines = stream.getvalue().splitlines()
    assert [line.split(": ")[-1] for line in lines] == ["d-line", "e-line"]


def test_json_lines_format(captured) -> None:
    logger, stream = captured
    control = LoggingControl(LogSettings(), root=logger)
    assert control.update({"log_format": "json"})["log_format"] == "json"
    logger.getChild("worker").warning("model '%s' slow", "simple")
    record = json.loads(stream.getvalue().splitlines()[-1])
    assert record["level"] == "WARNING" and record["message"] == "model 'simple' slow"
    assert record["logger"] == "ferry-logging-ext-test.worker" and record["time"].endswith("Z")


def test_from_level_maps_ferry_levels(captured) -> None:
    logger, stream = captured
    quiet = LoggingControl.from_level("error", root=logger)
    assert quiet.settings == LogSettings(log_info=False, log_warning=False)
    emit_all(logger)
    assert [line.split(": ")[-1] for line in stream.getvalue().splitlines()] == ["e-line"]
    loud = LoggingControl.from_level("debug", "ISO8601", root=logger)
    assert loud.settings == LogSettings(log_verbose_level=1, log_format="ISO8601")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"log_file": "/tmp/other.log"}, "log file location can not be updated through network protocol"),
        ({"log_format": "xml"}, "'log_format' must be one of default, ISO8601, json"),
        ({"log_info": "yes"}, "'log_info' must be true or false"),
        ({"log_verbose_level": -1}, "'log_verbose_level' must be a non-negative integer"),
        ({"log_level": 3}, "unknown log setting 'log_level'"),
        ({"log_info": False, "log_format": "xml"}, "log_format"),  # nothing applied when one is bad
    ],
)
def test_bad_updates_are_refused_and_change_nothing(captured, changes: dict, message: str) -> None:
    logger, _ = captured
    control = LoggingControl(LogSettings(), root=logger)
    before = control.get()
    with pytest.raises(InvalidArgument, match=message):
        control.update(changes)
    assert control.get() == before
