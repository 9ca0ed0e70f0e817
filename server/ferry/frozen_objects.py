"""Keep what a process is built of out of the garbage collector's full passes (``gc.freeze``).

Why: a full collection (generation 2) walks every object the collector tracks, and a model process
with its engines, configs and front doors loaded holds ~106,000 of them (~50 ms a pass on the shared
CPU machine). Requests in flight outlive the young generations (a batch's requests live until it
is answered), so at batches of 16 and more their objects set off a full pass every few thousand
requests: the collector's CPU per request in the model process went from 12 to 5 us over REST with
2 intakes (batch ~16), from 19 to 4 us at a batch of 64 (benchmarks/results/host-path-frozen.md).
What exists once the process is up does not become garbage while it serves, so it is collected once
and frozen before the process says it is ready (nothing in flight yet): later passes walk only what
came after.

A frozen object that becomes cyclic garbage is never collected, so where something built at start
is let go (a model version retired, ``repository.memory``) the objects are thawed and collected
for good. They are not frozen again then: requests in flight at that moment hold cycles (a queued
request and its future refer to each other) that would never be collected once frozen.
"""

from __future__ import annotations

import gc


def freeze_built_objects() -> None:
    """Collect what start-up left behind, then freeze every object alive now (call it once the
    process is built and before it takes requests)."""
    gc.collect()
    gc.freeze()


def thaw_and_collect() -> None:
    """A full collection that includes what was frozen (something built at start was let go)."""
    gc.unfreeze()
    gc.collect()
