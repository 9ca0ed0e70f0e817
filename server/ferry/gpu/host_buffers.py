"""Reused host buffers, one per name, that a GPU path copies into and out of.

Allocating page-locked (pinned) memory for every batch costs a driver call and holds memory the
caching allocator cannot hand back at once. A user of these buffers runs one batch at a time (one
lane of a pre-processor), or keeps one ``HostBuffers`` per batch in flight (a GPU instance), so one
buffer per name, grown to the largest batch seen, serves every batch. Where pinning is unavailable
(a CPU build of torch, a CPU device, or ``output_pinned_memory { enable: false }``) the same code
runs on plain host memory.
"""

from __future__ import annotations

import torch


class HostBuffers:
    """Byte buffers by name; a request above ``retain_bytes`` gets a buffer of its own, not kept."""

    def __init__(self, pinned: bool, retain_bytes: int | None = None) -> None:
        self.pinned = pinned
        self.retain_bytes = retain_bytes
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str) -> torch.Tensor | None:
        """The kept buffer of ``name`` (None before its first use)."""
        return self._buffers.get(name)

    def take(self, name: str, nbytes: int) -> torch.Tensor:
        """``nbytes`` bytes (uint8) of the buffer of ``name``, valid until the next ``take`` or ``stage`` of it."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < nbytes:
            buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=self.pinned)
            if self.retain_bytes is None or nbytes <= self.retain_bytes:
                self._buffers[name] = buffer  # else one oversized batch does not hold its memory for ever
        return buffer[:nbytes]

    def stage(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Start copying ``tensor`` into the buffer of ``name`` (asynchronous when pinned) and return the
        view it lands in. Read it after synchronising, and copy it out before the next batch (the
        answers of a batch may still be serialised when the next one overwrites the buffer)."""
        view = self.take(name, tensor.numel() * tensor.element_size()).view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor, non_blocking=self.pinned)
        return view

    def clear(self) -> None:
        self._buffers.clear()
