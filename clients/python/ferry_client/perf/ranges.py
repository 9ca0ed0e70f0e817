"""Parsing the sweep ranges of the command line: ``1:32:x2`` (geometric), ``4:16:4`` (linear), ``8``."""

from __future__ import annotations


def parse_range(text: str, what: str = "range", integer: bool = True) -> list[float]:
    """The values of a ``start[:end[:step]]`` range; a step written ``xK`` multiplies by K.

    Raises ValueError with the offending text, for argparse to show.
    """
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise ValueError(f"{what} '{text}': expected START[:END[:STEP]], e.g. 1:32:x2 or 4:16:4")
    cast = int if integer else float
    try:
        start = cast(parts[0])
        end = cast(parts[1]) if len(parts) > 1 else start
        geometric = len(parts) < 3 or parts[2].startswith("x")  # START:END alone doubles
        step = cast(parts[2].removeprefix("x")) if len(parts) == 3 else 2
    except ValueError:
        kind = "integers" if integer else "numbers"
        raise ValueError(f"{what} '{text}': START, END and STEP must be {kind}") from None
    if start <= 0 or end < start:
        raise ValueError(f"{what} '{text}': need 0 < START <= END")
    if (geometric and step <= 1) or step <= 0:
        raise ValueError(f"{what} '{text}': STEP must be > 0 (or xK with K > 1)")
    values: list[float] = []
    value = start
    while value <= end * (1 + 1e-9):
        values.append(value)
        value = value * step if geometric else value + step
    if values[-1] != end and len(parts) > 1:
        values.append(end)  # always measure the end point asked for
    return values
