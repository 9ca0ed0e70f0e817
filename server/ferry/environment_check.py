"""Warn about ``FERRY_*`` environment variables that no option reads.

pydantic-settings ignores unknown names, so a typo (``FERRY_HTTP_PROT=9000``) would leave the
default in place without a word; this check names the variable and the closest real one.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping

log = logging.getLogger("ferry")

PREFIX = "FERRY_"

#: FERRY_* names that Ferry's own tools read outside the server's options: the intake processes'
#: hand-off, the container health check, the compose files' variables and a test's tool path.
OTHER_VARIABLES = frozenset(
    {"FERRY_INTAKE", "FERRY_HEALTHCHECK_TIMEOUT", "FERRY_IMAGE", "FERRY_GPU_COUNT", "FERRY_PERF_ANALYZER"}
)


def option_variables() -> frozenset[str]:
    """The variable of every ``ferry serve`` option (``Settings`` field)."""
    from .settings import Settings

    return frozenset(PREFIX + name.upper() for name in Settings.model_fields)


def unknown_variable_warnings(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One message per ``FERRY_*`` name in ``environ`` that is not in ``known``, sorted by name."""
    known = set(known)
    suffixes = sorted(name.removeprefix(PREFIX) for name in known)  # the shared prefix would match anything
    messages = []
    for name in sorted(key for key in environ if key.startswith(PREFIX) and key not in known):
        closest = difflib.get_close_matches(name.removeprefix(PREFIX), suffixes, n=1, cutoff=0.6)
        hint = (
            f"did you mean {PREFIX}{closest[0]}?" if closest else "no option reads it (ferry serve --help lists them)"
        )
        messages.append(f"environment variable {name} is not a Ferry option and is ignored; {hint}")
    return messages


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """Log a warning for each unknown ``FERRY_*`` variable (called once at start-up)."""
    for message in unknown_variable_warnings(environ, option_variables() | OTHER_VARIABLES):
        log.warning("%s", message)
