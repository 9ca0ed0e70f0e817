"""The objects a process is built of are frozen out of full collections (ferry/frozen_objects.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ferry.frozen_objects import freeze_built_objects


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Leave the test process as it was: nothing frozen."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freezing_collects_what_start_up_left_then_freezes_what_is_alive() -> None:
    garbage = weakref.ref(Node())  # cyclic garbage made while the process started
    alive = Node()
    freeze_built_objects()
    assert garbage() is None  # collected, not frozen for ever
    assert gc.get_freeze_count() > 0
    assert not any(obj is alive for obj in gc.get_objects())  # frozen: no collection walks it
