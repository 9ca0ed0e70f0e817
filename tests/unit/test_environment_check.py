"""A mistyped FERRY_* variable is named in a warning with the closest real option."""

from __future__ import annotations

import logging

import pytest

from ferry.environment_check import (
    OTHER_VARIABLES,
    option_variables,
    unknown_variable_warnings,
    warn_unknown_variables,
)


def test_every_option_has_its_variable() -> None:
    known = option_variables()
    assert {"FERRY_HTTP_PORT", "FERRY_MODEL_REPOSITORY", "FERRY_AUTH_TOKENS"} <= known


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("FERRY_HTTP_PROT", "FERRY_HTTP_PORT"),
        ("FERRY_LOGLEVEL", "FERRY_LOG_LEVEL"),
        ("FERRY_MODEL_REPO", "FERRY_MODEL_REPOSITORY"),
        ("FERRY_GRPC_PORTS", "FERRY_GRPC_PORT"),
    ],
)
def test_typo_names_the_closest_option(name: str, closest: str) -> None:
    [message] = unknown_variable_warnings({name: "1", "FERRY_HTTP_PORT": "9000", "HOME": "/"}, option_variables())
    assert message == f"environment variable {name} is not a Ferry option and is ignored; did you mean {closest}?"


def test_unrelated_name_gets_no_guess() -> None:
    [message] = unknown_variable_warnings({"FERRY_ZZZ": "1"}, option_variables())
    assert message.endswith("no option reads it (ferry serve --help lists them)")


def test_known_and_tool_variables_are_quiet(caplog: pytest.LogCaptureFixture) -> None:
    environ = {name: "1" for name in option_variables() | OTHER_VARIABLES}
    with caplog.at_level(logging.WARNING, logger="ferry"):
        warn_unknown_variables({**environ, "FERRY_HTTP_PROT": "9000"})
    assert [r.getMessage() for r in caplog.records] == [
        "environment variable FERRY_HTTP_PROT is not a Ferry option and is ignored; did you mean FERRY_HTTP_PORT?"
    ]
