"""The objects a process is built of are frozen out of full collections; a retired model's are
collected all the same (ferry/frozen_objects.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ferry.frozen_objects import freeze_built_objects
from ferry.repository.memory import release_free_memory


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


def test_a_retired_model_s_frozen_cycles_are_collected() -> None:
    """What was frozen at start (a model's objects) and let go at unload is freed by the collection
    the unload runs; a plain ``gc.collect`` never frees frozen objects."""
    model = Node()
    gone = weakref.ref(model)
    freeze_built_objects()
    del model
    gc.collect()
    assert gone() is not None  # frozen: ordinary collections leave it
    release_free_memory()  # what ModelManager._retire runs once a version is closed
    assert gone() is None
    assert gc.get_freeze_count() == 0  # not frozen again: requests in flight then hold cycles
