"""Pre-processing a whole batch with torch on a device (``preprocess { device: GPU }``).

Images are decoded on the CPU (Pillow), or their JPEGs on the device itself (``decode: GPU``,
``device_decode``: those are device tensors already). The uint8 pixels of the others are packed
into one reused host buffer (pinned on CUDA) and uploaded in one copy; images of the same size are
resized together in one call, placed into one batch tensor with the geometry of the CPU path (``preprocess.place``),
and colour order, scaling, mean/std, layout and type are applied to the whole batch at once. The
result stays on the device (``on_device``: the batcher calls it once per batch, ``device_pixels``,
and the torch engine reads it where it is), or comes back to host memory in one copy
through a reused pinned buffer, for a caller that wants numpy. Each call runs on a *lane*: a
long-lived CUDA stream with its host buffers, made on first need and kept, one per call running at
the same time (the decode pool's threads), so no call creates a stream or allocates pinned memory
once the lanes exist.

Resizing uses ``torch.nn.functional.interpolate`` with antialiasing for BILINEAR and BICUBIC (close
to Pillow's filters when shrinking) and ``nearest-exact`` for NEAREST, then rounds to whole pixel
values as Pillow's 8-bit resize does. Results agree with the CPU path to within a pixel level or
two where resampling happens, and exactly elsewhere. Works on any torch device, CPU included.
It reproduces ``resize_engine: PILLOW`` only: the OpenCV engine, LANCZOS, AREA, ``pad_then_resize``
and ``resize_alignment: CORNERS`` are refused at load with device: GPU (``PreprocessSpec.from_config``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.nn import functional

from ferry_client.protocol import model_config_pb2 as mc

from ..gpu.host_buffers import HostBuffers
from ..gpu.setup_lock import CUDA_SETUP_LOCK
from .device_decode import DeviceJpegDecoder
from .preprocess import Placement, PreprocessSpec

_PRE = mc.FerryPreprocess
#: FerryPreprocess.Interpolation -> (interpolate mode, antialias), following Pillow's filters
_MODES: dict[int, tuple[str, bool]] = {
    _PRE.BILINEAR: ("bilinear", True),
    _PRE.BICUBIC: ("bicubic", True),
    _PRE.NEAREST: ("nearest-exact", False),
}
_TORCH_DTYPES = {"FP32": torch.float32, "FP16": torch.float16, "UINT8": torch.uint8}
#: A lane keeps host buffers up to this size; a larger batch gets buffers of its own, freed after it.
RETAINED_BYTES = 64 << 20


class Lane:
    """What one call at a time runs on: a long-lived stream (CUDA only) and reused host buffers."""

    def __init__(self, device: torch.device) -> None:
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if cuda else None
        self.buffers = HostBuffers(pinned=cuda, retain_bytes=RETAINED_BYTES)

    def context(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()


class Lanes:
    """Lanes made on demand and kept: as many as calls have run at the same time."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._lock = threading.Lock()
        self._free: list[Lane] = []
        self.made = 0

    @contextlib.contextmanager
    def take(self) -> Iterator[Lane]:
        with self._lock:
            lane = self._free.pop() if self._free else None
            if lane is None:
                self.made += 1
        if lane is None:
            with CUDA_SETUP_LOCK:
                lane = Lane(self._device)
        try:
            yield lane
        finally:
            if lane.stream is not None:
                lane.stream.synchronize()  # a call that failed midway may still be copying from its buffers
            with self._lock:
                self._free.append(lane)


class DevicePreprocessor:
    """Resizes and normalises a batch of decoded images on one torch device."""

    def __init__(self, spec: PreprocessSpec, device: str | torch.device) -> None:
        if spec.interpolation not in _MODES:
            name = _PRE.Interpolation.Name(spec.interpolation)
            raise ValueError(f"interpolation {name} is not available on a torch device")
        if spec.engine != _PRE.PILLOW or spec.pad_then_resize or spec.resize_alignment != _PRE.PIXEL_CENTERS:
            raise ValueError(
                "the torch device path reproduces resize_engine: PILLOW with resize-then-pad and pixel-centre "
                "alignment only"
            )
        self.spec = spec
        self.device = torch.device(device)
        self._mode, self._antialias = _MODES[spec.interpolation]
        std = torch.tensor(spec.std, dtype=torch.float32)
        self._pad = float(round(spec.pad_value)) if spec.datatype == "UINT8" else spec.pad_value
        with CUDA_SETUP_LOCK:
            self._gain = (spec.scale / std).view(-1, 1, 1).to(self.device)
            self._bias = (-torch.tensor(spec.mean, dtype=torch.float32) / std).view(-1, 1, 1).to(self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # gain and bias were copied on the default stream
        self.lanes = Lanes(self.device)
        #: JPEGs decoded on the device (``decode: GPU``); None: every image is decoded on the CPU.
        gray = spec.color_order == _PRE.GRAY
        self.decoder = DeviceJpegDecoder(self.device, gray) if spec.decode == _PRE.GPU else None

    def __call__(
        self, images: Sequence[np.ndarray | torch.Tensor], placements: Sequence[Placement], on_device: bool = False
    ) -> np.ndarray | torch.Tensor:
        """``images``: (H, W, C) uint8 pixels in the spec's colour mode (RGB or L), host arrays or tensors
        on this device already (``device_decode``); one placement each. Returns the batch as a tensor
        on this device when ``on_device`` (ready: the lane's stream has finished it), else as numpy."""
        with self.lanes.take() as lane, torch.inference_mode(), lane.context():
            batch = self._normalise(self._assemble(self._upload(lane, images), placements))
            if on_device:
                if lane.stream is not None:
                    lane.stream.synchronize()  # whoever reads it next runs on another stream
                return batch
            if lane.stream is None:
                return batch.numpy()  # a new tensor on the CPU device: nothing to copy back
            host = lane.buffers.stage("download", batch)
            lane.stream.synchronize()
            return host.numpy().copy()  # the lane's buffer serves its next call

    def _upload(self, lane: Lane, images: Sequence[np.ndarray | torch.Tensor]) -> list[torch.Tensor]:
        """Every host image packed into the lane's upload buffer and sent to the device in one copy;
        returns (H, W, C) device tensors of all of them (those decoded on the device as they are)."""
        host_images = [pixels for pixels in images if isinstance(pixels, np.ndarray)]
        sizes = [int(pixels.nbytes) for pixels in host_images]
        device: torch.Tensor | None = None
        if host_images:
            host = lane.buffers.take("upload", sum(sizes))
            packed = host.numpy()
            offset = 0
            for pixels, size in zip(host_images, sizes, strict=True):
                np.copyto(packed[offset : offset + size].reshape(pixels.shape), pixels, casting="no")
                offset += size
            device = host.to(self.device, non_blocking=True)
        views, offset, next_size = [], 0, iter(sizes)
        for pixels in images:
            if isinstance(pixels, torch.Tensor):
                views.append(pixels)
                continue
            assert device is not None
            size = next(next_size)
            views.append(device[offset : offset + size].view(pixels.shape))
            offset += size
        return views

    def _assemble(self, images: Sequence[torch.Tensor], placements: Sequence[Placement]) -> torch.Tensor:
        """Resized pixels (0..255, float) of every image in an NCHW batch; the rest is the pad value.
        Images of one size share one placement, so each size is resized and placed in one go."""
        spec = self.spec
        batch = torch.full(
            (len(images), spec.channels, spec.height, spec.width), self._pad, dtype=torch.float32, device=self.device
        )
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, image in enumerate(images):
            groups.setdefault(tuple(image.shape), []).append(index)
        for indices in groups.values():
            where = placements[indices[0]]
            stack = torch.stack([images[index] for index in indices]).permute(0, 3, 1, 2).float()
            width, height = where.resized
            if stack.shape[-2:] != (height, width):
                corners = {"align_corners": False} if self._mode != "nearest-exact" else {}
                stack = functional.interpolate(
                    stack, size=(height, width), mode=self._mode, antialias=self._antialias, **corners
                )
                stack = stack.round_().clamp_(0.0, 255.0)  # Pillow resizes in 8 bits
            rows, cols = where.rows, where.cols
            region = stack[:, :, where.crop_top : where.crop_top + rows, where.crop_left : where.crop_left + cols]
            at_rows, at_cols = slice(where.top, where.top + rows), slice(where.left, where.left + cols)
            if len(indices) == 1:
                batch[indices[0], :, at_rows, at_cols] = region[0]
            else:
                batch[torch.tensor(indices, device=self.device), :, at_rows, at_cols] = region
        return batch

    def _normalise(self, batch: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if spec.color_order == _PRE.BGR:
            batch = batch.flip(1)
        if spec.datatype != "UINT8":
            batch = batch * self._gain + self._bias
        if not spec.channels_first:
            batch = batch.permute(0, 2, 3, 1)
        return batch.to(_TORCH_DTYPES[spec.datatype]).contiguous()
