"""``ferry serve``'s flags and ``FERRY_*`` variables come from ``Settings`` alone: every field has a flag
(or says why it is environment-only), every flag sets a field, and a value given either way arrives
in ``Settings`` as the same typed value. A setting added without its flag, or a flag without its
setting, fails here."""

from __future__ import annotations

import argparse
import enum
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ferry.cli import build_parser
from ferry.cli_settings import _without_none, default_of, env_name, flag_name, flag_of, flag_options
from ferry.settings import Settings


def serve_parser() -> argparse.ArgumentParser:
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subcommands.choices["serve"]


def serve_flags() -> dict[str, argparse.Action]:
    """Every option string of ``ferry serve`` (aliases and --no- forms included) -> its action."""
    return {
        option: action
        for action in serve_parser()._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    }


def sample(name: str) -> tuple[Any, list[str], str]:
    """A value of the field other than its default: (the typed value, the flag's argv, the variable's text)."""
    field = Settings.model_fields[name]
    kind = _without_none(field.annotation)
    default = default_of(field)
    flag = flag_name(name)
    if kind is bool:
        return (not default, [flag if not default else "--no-" + flag[2:]], str(not default).lower())
    if typing.get_origin(kind) is list:
        values: list[Any] = [1000, 1001] if typing.get_args(kind) == (int,) else ["first", "second"]
        return (values, [flag, str(values[0]), flag, str(values[1])], json.dumps(values))
    if typing.get_origin(kind) is typing.Literal:
        value = next(choice for choice in typing.get_args(kind) if choice != default)
        return (value, [flag, value], value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        member = next(m for m in kind if m != default)
        return (member, [flag, member.value], member.value)
    if kind is int:
        assert isinstance(default, int)
        return (default + 1, [flag, str(default + 1)], str(default + 1))
    if kind is float:
        assert isinstance(default, float)
        return (default + 1.5, [flag, str(default + 1.5)], str(default + 1.5))
    if kind is Path:
        return (Path("some/where"), [flag, "some/where"], "some/where")
    if kind is str:
        return ("example.invalid", [flag, "example.invalid"], "example.invalid")
    if kind is SecretStr:
        return ("token-a,token-b", [], "token-a,token-b")
    raise AssertionError(f"no sample for {name}: {kind!r}")


def plain(value: object) -> object:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


FLAGGED = [name for name, field in Settings.model_fields.items() if not flag_of(field).env_only]
ENV_ONLY = [name for name, field in Settings.model_fields.items() if flag_of(field).env_only]


def test_every_setting_has_a_flag_and_every_flag_a_setting() -> None:
    flags = serve_flags()
    dests = {action.dest for action in flags.values()}
    assert dests <= set(Settings.model_fields), f"flags without a setting: {dests - set(Settings.model_fields)}"
    assert set(FLAGGED) <= dests, f"settings without a flag: {set(FLAGGED) - dests}"
    assert not set(ENV_ONLY) & dests, "an environment-only setting has a flag"
    for name in FLAGGED:
        assert flags[flag_name(name)].dest == name  # the flag is the field's name, dashed


def test_environment_only_settings_say_why() -> None:
    assert ENV_ONLY == ["auth_tokens"]  # a flag would put the tokens in `ps` for every user to read
    epilog = " ".join((serve_parser().epilog or "").split())
    assert "FERRY_AUTH_TOKENS" in epilog and "ps" in epilog


def test_existing_flag_names_are_kept() -> None:
    """Names users and the docs rely on, aliases included (a rename would break their scripts)."""
    flags = serve_flags()
    for old in (
        "--model-repo",
        "--exit-timeout",
        "--dashboard",
        "--no-dashboard",
        "--load-model",
        "--auth-token-file",
        "--auth-public-health",
        "--auth-metrics",
        "--allow-python-models",
        "--tls-cert",
        "--tls-key",
        "--tls-client-ca",
        "--intake-processes",
        "--cache-size",
        "--trace-file",
        "--trace-otlp-endpoint",
    ):
        assert old in flags, old
    assert flags["--model-repo"].dest == "model_repository"
    assert flags["--exit-timeout"].dest == "exit_timeout_secs"


@pytest.mark.parametrize("name", FLAGGED)
def test_help_is_the_field_description_with_default_and_variable(name: str) -> None:
    field = Settings.model_fields[name]
    action = serve_flags()[flag_name(name)]
    assert field.description and action.help
    text = action.help.replace("%%", "%")
    assert text.startswith(field.description)
    assert f"env {env_name(name)})" in text
    assert "default: " in text


@pytest.mark.parametrize("name", FLAGGED)
def test_a_flag_sets_its_setting(name: str) -> None:
    value, argv, _ = sample(name)
    args = serve_parser().parse_args(argv)
    assert plain(getattr(Settings(**flag_options(args)), name)) == value


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_a_variable_sets_its_setting(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    value, _, text = sample(name)
    monkeypatch.setenv(env_name(name), text)
    assert plain(getattr(Settings(), name)) == value


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_HTTP_PORT", "9100")
    monkeypatch.setenv("FERRY_GRPC_PORT", "9101")
    args = serve_parser().parse_args(["--http-port", "9200"])
    settings = Settings(**flag_options(args))
    assert (settings.http_port, settings.grpc_port) == (9200, 9101)


def test_choices_come_from_the_field_type() -> None:
    flags = serve_flags()
    assert flags["--model-control-mode"].choices == ["none", "explicit", "poll"]
    assert flags["--log-level"].choices == ["debug", "info", "warning", "error"]
    assert flags["--log-format"].choices == ["default", "ISO8601", "json"]


def test_upper_case_log_level_variable_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_LOG_LEVEL", "DEBUG")
    assert Settings().log_level == "debug"


def test_unset_flags_leave_the_environment_and_defaults_alone() -> None:
    assert flag_options(serve_parser().parse_args([])) == {}
