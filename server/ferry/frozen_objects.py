"""Keep what a process is built of out of the garbage collector's full passes (``gc.freeze``).

Why: a full collection (generation 2) walks every object the collector tracks, and a model process
holds ~106,000 of them once its modules are imported and its models loaded (~93,000 before it
opens a door). Requests in flight outlive the young generations (a batch's requests live until it
is answered), so at batches of 16 and more their objects set off a full pass every few thousand
requests. What exists once the process is built does not become garbage while it serves, so it is
collected and frozen before any door opens (nothing can be in flight then): later passes walk only
what came after. The model process's collector CPU per request over REST with 2 intakes (batch
~16) went from 7.7-8.7 to 4.3-4.9 us, none either way over gRPC (batch ~1): see
benchmarks/results/host-path-frozen.md.

A frozen object that becomes cyclic garbage is never collected, so where something built at start
is let go (a model version retired, ``repository.memory``) the objects are thawed and collected
for good. They are not frozen again then: requests in flight would be frozen with them, and what
of theirs ends in a reference cycle (a failed request's exception, its traceback's frames and the
future holding it) would never be freed.
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
