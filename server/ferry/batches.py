"""How many items one execution of a model takes: the one chunking every path uses."""

from __future__ import annotations


def execution_slices(items: int, max_batch_size: int) -> list[slice]:
    """The executions of ``items`` batch items for a model of ``max_batch_size``: runs of at most
    that many, or one item each for a model that cannot batch (``max_batch_size`` 0)."""
    size = max_batch_size if max_batch_size > 0 else 1
    return [slice(start, min(start + size, items)) for start in range(0, items, size)]
