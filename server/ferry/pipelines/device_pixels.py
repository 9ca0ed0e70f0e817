"""Decoded images whose device pre-processing waits for their batch (``Memory.PIXELS``).

For a model that pre-processes on its device and is served by the dynamic batcher, the image stage
only decodes (on the CPU, or JPEGs on the device with ``decode: GPU``) and places each image; the
batcher gathers the pixels of every request of a batch and the pre-processor runs once on all of
them (``gather``): one upload, one resize per image size, colour, normalisation and layout on the
whole batch, instead of once per slice of each request. It looks like the tensor it will become
(``shape``, ``device``, ``dtype``, ``nbytes``) to validation and to the batcher's signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .preprocess import Placement

if TYPE_CHECKING:
    from .runtime import BatchPreprocessor


class DevicePixels:
    """A run of decoded images (``(H, W, C)`` uint8 host arrays or device tensors) with their
    placements, and the pre-processor that turns them into the model's batch tensor."""

    __slots__ = ("pixels", "placements", "preprocessor", "shape", "dtype")

    def __init__(
        self,
        pixels: Sequence[Any],
        placements: Sequence[Placement],
        preprocessor: BatchPreprocessor,
        item_shape: tuple[int, ...],
        datatype: str,
    ) -> None:
        self.pixels = tuple(pixels)
        self.placements = tuple(placements)
        self.preprocessor = preprocessor
        self.shape = (len(self.pixels), *item_shape)
        self.dtype = datatype  # a V2 datatype: never equal to a numpy or torch dtype in a batch signature

    @property
    def device(self) -> object:
        return self.preprocessor.device

    @property
    def nbytes(self) -> int:
        """The decoded pixels' bytes (what the batch holds until it is pre-processed)."""
        return sum(int(pixels.nbytes) for pixels in self.pixels)

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, part: slice) -> DevicePixels:
        return DevicePixels(self.pixels[part], self.placements[part], self.preprocessor, self.shape[1:], self.dtype)

    @classmethod
    def joined(cls, parts: Sequence[DevicePixels]) -> DevicePixels:
        """Several runs as one, in order (a request's slices)."""
        first = parts[0]
        pixels = [image for part in parts for image in part.pixels]
        placements = [where for part in parts for where in part.placements]
        return cls(pixels, placements, first.preprocessor, first.shape[1:], first.dtype)

    def gather(self, others: Sequence[DevicePixels]) -> Any:
        """This run and ``others`` (the rest of a batch, in order) pre-processed in one call: the
        batch as a tensor on the device."""
        run = self.joined([self, *others]) if others else self
        return run.preprocessor(run.pixels, run.placements, True)
