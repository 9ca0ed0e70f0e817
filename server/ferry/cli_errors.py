"""User mistakes on the command line become one clear line on stderr and a non-zero exit code.

A traceback tells a user nothing they can act on; a line naming the flag (or environment variable),
the value and what would work does. Checks that can run before anything starts (repository, ports)
run here, so a mistake never costs a model load first.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

#: Python packages that only an optional extra of ``ferry`` installs, and that extra's name.
EXTRA_OF_MODULE = {
    "torch": "torch",
    "torchvision": "torch",
    "onnx2torch": "torch",
    "tensorrt": "tensorrt",
    "cuda": "tensorrt",
    "pynvml": "gpu",
}

EXIT_USAGE = 2  # argparse's code for a bad command line
EXIT_FAILURE = 1


class UserError(Exception):
    """A mistake the user can fix; its message is the whole story (one line, no traceback)."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (the usage block is what ``--help`` is for), and a misspelt
    flag gets the nearest one the command knows (``--http-prot``: did you mean ``--http-port``?)."""

    _command: str | None = None  # the subcommand of the last parse, whose flags a misspelling is matched to

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        self._command = getattr(parsed, "command", None)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        command = f"{self.prog} {self._command}" if self._command else self.prog
        print(f"{self.prog}: {message}{self._suggestion(message)} (see '{command} --help')", file=sys.stderr)
        sys.exit(EXIT_USAGE)

    def _known_flags(self) -> list[str]:
        """This parser's flags and those of the subcommand being parsed."""
        flags = [option for action in self._actions for option in action.option_strings]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and self._command in action.choices:
                chosen = action.choices[self._command]
                flags += [option for sub in chosen._actions for option in sub.option_strings]
        return [flag for flag in flags if flag.startswith("--")]

    def _suggestion(self, message: str) -> str:
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        known = self._known_flags()
        matches = {}
        for token in message.removeprefix(prefix).split():
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and (close := difflib.get_close_matches(flag, known, n=1)):
                matches[flag] = close[0]
        if len(matches) == 1:
            return f"; did you mean {next(iter(matches.values()))}?"
        return "".join(f"; {flag}: did you mean {match}?" for flag, match in matches.items())


def settings_error(exc: ValidationError) -> UserError:
    """A pydantic validation error of ``Settings`` as one line naming the flag and its variable."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        flag = "--" + field.replace("_", "-")
        value = error.get("input")
        shown = f" (got {value!r})" if not isinstance(value, dict) else ""
        message = error["msg"][0].lower() + error["msg"][1:]
        problems.append(f"{flag} / FERRY_{field.upper()}: {message}{shown}")
    return UserError("; ".join(problems), EXIT_USAGE)


def check_repository(path: Path) -> None:
    """The model repository must be a directory this process can list."""
    if not path.exists():
        raise UserError(f"model repository '{path}' does not exist (give a directory of models, e.g. model_repo)")
    if not path.is_dir():
        raise UserError(f"model repository '{path}' is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UserError(f"model repository '{path}' is not readable by this user")
    sign = model_directory_sign(path)
    if sign:
        parent = path.resolve().parent
        raise UserError(
            f"model repository '{path}' holds {sign}: this looks like a model directory; give its parent ('{parent}')"
        )


def model_directory_sign(path: Path) -> str:
    """What makes ``path`` look like one model's folder rather than a repository ("" if nothing):
    its own config.pbtxt, or a version folder (digits) holding a model file directly. A model named
    with digits in a real repository holds version folders, not model files."""
    if (path / "config.pbtxt").is_file():
        return "config.pbtxt"
    for version in sorted(path.iterdir()):
        if version.name.isdigit() and version.is_dir():
            for entry in version.iterdir():
                if entry.is_file() and entry.name.startswith("model."):
                    return f"{version.name}/{entry.name}"
    return ""


#: What ``check_ports_free`` says of a taken port.
PORT_IN_USE = "port already in use"
#: What a server start that lost one of its ports prints: this check's line, or uvicorn's when the
#: port was taken after the check, at its bind. A launcher that chose the ports (``ferry tune``, the
#: tests) starts again on others when it reads one of these.
PORT_TAKEN_LINES = (PORT_IN_USE, "address already in use")


def check_ports_free(host: str, ports: dict[str, int]) -> None:
    """Each enabled port (non-zero) must be free to bind, checked before any model loads."""
    for flag, port in ports.items():
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise UserError(f"--host {host!r}: cannot resolve it ({exc.strerror})", EXIT_USAGE) from None
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UserError(
                        f"{flag} {port}: {PORT_IN_USE} on {host} (stop the other server or choose "
                        f"another port; 0 disables it)"
                    ) from None
                if exc.errno == errno.EACCES:
                    raise UserError(
                        f"{flag} {port}: not allowed to bind it (ports below 1024 need privileges)"
                    ) from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise UserError(f"--host {host}: not an address of this machine", EXIT_USAGE) from None
                raise UserError(f"{flag} {port} on {host}: {exc.strerror}") from None


def install_hint(extra: str) -> str:
    """The command that installs a Ferry extra from the checkout (``ferry[...]`` on PyPI is another project)."""
    return f"pip install '.[{extra}]' in the Ferry checkout"


def missing_extra(exc: ModuleNotFoundError) -> UserError:
    """An optional package that is not installed, with the install command that brings it."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    hint = install_hint(extra) if extra else f"pip install {module}"
    return UserError(f"this needs the Python package '{module}', which is not installed ({hint})")


def fail(prog: str, error: UserError) -> int:
    """Print the error's one line and return its exit code."""
    print(f"{prog}: {error}", file=sys.stderr)
    return error.code
