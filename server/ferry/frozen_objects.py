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

Models are loaded after that, so what a model version holds is never frozen and goes with it at
unload as before. A frozen object that became cyclic garbage would never be collected; what is
frozen (the modules, the server's parts built before it starts) lives as long as the process.
"""

from __future__ import annotations

import gc


def freeze_built_objects() -> None:
    """Collect what start-up left behind, then freeze every object alive now (call it once the
    process is built and before it takes requests)."""
    gc.collect()
    gc.freeze()
