"""The running request's share of ``--max-inflight-bytes``, for stages below the front doors.

Why here: admission lives with the front doors (``api/admission.py``), but a stage deep in the
request path (image decoding) learns what it will hold only when it runs; it counts that on the
ticket the front door set for the task, without every layer passing the ticket on.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Protocol


class Reserves(Protocol):
    def reserve(self, nbytes: int) -> None: ...

    def hold(self, nbytes: int) -> Callable[[], None]: ...


#: The ticket of the request the running task serves (None outside admitted requests).
current_ticket: contextvars.ContextVar[Reserves | None] = contextvars.ContextVar("ferry_admission_ticket", default=None)


def reserve_for_current(nbytes: int) -> None:
    """Count ``nbytes`` against the running request's admission, when it has one."""
    ticket = current_ticket.get()
    if ticket is not None:
        ticket.reserve(nbytes)


def hold_for_current(nbytes: int) -> Callable[[], None] | None:
    """Count ``nbytes`` that may outlive the running request (``Ticket.hold``), or that a stage
    gives back once it is over (an OCR page's detector, then its crops), when it has a ticket;
    the returned function stops counting them."""
    ticket = current_ticket.get()
    return None if ticket is None else ticket.hold(nbytes)
