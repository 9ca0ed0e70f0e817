"""The query parameters of ``/classify`` and ``/detect``, parsed strictly.

A mistyped name (``threshold=``), an empty value or one out of range would otherwise be ignored or
answered with a validation dump; each gets a 400 that names the parameter and what it accepts.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import QueryParams

from ..errors import InvalidArgument
from ..inference.validation import UINT64_MAX


@dataclass(frozen=True)
class QueryOption:
    """One query parameter: its name, number kind and accepted range (``high`` None = unbounded)."""

    name: str
    kind: type[int] | type[float]
    low: float
    high: float | None
    description: str

    def accepts(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        if self.high is None:
            return f"{noun} >= {self._bound(self.low)}"
        return f"{noun} between {self._bound(self.low)} and {self._bound(self.high)}"

    def _bound(self, value: float) -> str:
        return str(int(value)) if self.kind is int else f"{value:g}"

    def parse(self, text: str) -> int | float:
        if text.strip() == "":
            raise InvalidArgument(f"query parameter '{self.name}' is empty; give {self.accepts()}")
        try:
            value = self.kind(text)
        except ValueError:
            raise InvalidArgument(
                f"query parameter '{self.name}' must be {self.accepts()}, got '{text[:40]}'"
            ) from None
        if not math.isfinite(value) or value < self.low or (self.high is not None and value > self.high):
            raise InvalidArgument(f"query parameter '{self.name}' must be {self.accepts()}, got {text[:40]}")
        return value


CLASSIFY_QUERY = (QueryOption("top_k", int, 1, None, "classes per image (default: the model's top_k, else 5)"),)
DETECT_QUERY = (
    QueryOption("score_threshold", float, 0.0, 1.0, "lowest score kept (default: the model's)"),
    QueryOption("iou_threshold", float, 0.0, 1.0, "overlap above which NMS drops a box (default: the model's)"),
    QueryOption("max_detections", int, 1, None, "detections per image at most (default: the model's)"),
)

#: V2 infer's request parameters, accepted as query parameters by /classify and /detect.
INFER_QUERY = (
    QueryOption("priority", int, 0, UINT64_MAX, "queue priority, as V2 infer's 'priority' parameter (1 is highest)"),
    QueryOption("timeout", int, 0, UINT64_MAX, "queue timeout in microseconds, as V2 infer's 'timeout' parameter"),
)
INFER_PARAMETERS = tuple(option.name for option in INFER_QUERY)

#: Query names the route itself binds: ``?version=`` on the paths without a version segment.
ROUTE_QUERY = frozenset({"version"})


def parse_image_query(params: QueryParams, options: Sequence[QueryOption], endpoint: str) -> dict[str, Any]:
    """The options ``params`` sets (None for those it does not); unknown or repeated names are errors."""
    by_name = {option.name: option for option in options}
    values: dict[str, Any] = dict.fromkeys(by_name)
    for name in params:
        if name in ROUTE_QUERY:
            continue
        option = by_name.get(name)
        if option is None:
            closest = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.5)
            hint = f"; did you mean '{closest[0]}'?" if closest else ""
            accepted = ", ".join(by_name) or "none"
            raise InvalidArgument(f"unknown query parameter '{name[:40]}' for /{endpoint} (accepted: {accepted}){hint}")
        given = params.getlist(name)
        if len(given) > 1:
            raise InvalidArgument(f"query parameter '{name}' given {len(given)} times; give it once")
        values[name] = option.parse(given[0])
    return values


def openapi_query(options: Sequence[QueryOption]) -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` entries for ``options`` (the handlers read the query themselves)."""
    entries = []
    for option in options:
        schema: dict[str, Any] = {"type": "integer" if option.kind is int else "number", "minimum": option.low}
        if option.high is not None:
            schema["maximum"] = option.high
        entries.append(
            {"name": option.name, "in": "query", "required": False, "description": option.description, "schema": schema}
        )
    return entries
