"""Sane ranges for the numbers a model config carries, checked when it loads.

A config reaches the server from the repository or from any caller of the load API (its ``config``
parameter), so a number is as hostile as a request body: ``instance_group { count: 100000 }`` kept
a load building instances for ever (3 GB and counting), an OCR ``limit_side_len`` of 2^62 or a NaN
threshold loaded and waited for the first page. Every number is checked against a range here, the
same way wherever the config came from, and refused with a message naming the field and the range.
NaN is outside every range.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ModelLoadError


@dataclass(frozen=True)
class Range:
    """The inclusive range ``low..high`` one number must be in."""

    low: float
    high: float

    def check(self, value: float, field: str, where: str) -> None:
        """Refuse ``value`` (``field`` of ``where``) unless it is within the range (NaN never is)."""
        if not self.low <= value <= self.high:
            raise ModelLoadError(f"{where}: {field} must be within {_text(self.low)}..{_text(self.high)}, got {value}")


def _text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)
