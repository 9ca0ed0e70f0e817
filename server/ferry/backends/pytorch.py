"""PyTorch backend (Triton's ``pytorch_libtorch`` platform, ``pytorch`` backend): TorchScript
``model.pt`` files, or ONNX models converted by onnx2torch at load (see torch_options.py).

Each instance owns one copy of the module on its device. On a GPU an instance also owns one CUDA
stream, page-locked (pinned) host buffers that the scheduler assembles batches in (``input_buffer``),
and optionally one CUDA graph per batch-size bucket. A batch then costs one asynchronous
host-to-device copy per input (on a copy stream beside the compute stream), one graph replay (or an
eager forward pass), and one device-to-host copy per requested output into that output's reused
pinned buffer (``gpu/host_buffers.py``), followed by a single wait on an event. A GPU instance
``overlaps_batches``: ``launch`` enqueues all of that and returns, ``finish`` waits, and the
scheduler launches the next batch in between, in the other of two sets of pinned input and output
buffers (``slot``), so its copy runs while this one computes. On the CPU the module runs eagerly on
the request memory itself. The device is chosen at run time from the instance group and
``torch.cuda.is_available()``.

Inputs may be torch tensors on a device already (``takes_device_inputs``: a device pre-processor's
batch, joined on the device by the scheduler): those are used where they are (on a GPU: read by the
graph's device-to-device copy or the eager pass, after the stream that made them), with no pinned
staging and no host round trip; only the outputs come back to host memory, once per batch, except
those a caller writes into a CUDA shared memory region (``compute_keeping``), which stay on the
device (cloned on the instance's stream, which is synchronised before they are handed over).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ferry_client.protocol import model_config_pb2 as mc

from ..cores import usable_cores
from ..errors import FerryError, InvalidArgument, ModelLoadError
from ..gpu.host_buffers import HostBuffers
from ..gpu.setup_lock import CUDA_SETUP_LOCK
from .base import BATCHES_IN_FLIGHT, Backend, Instance, InstanceSpec, ModelIO
from .cuda_graphs import CudaGraphs
from .torch_loading import LoadedModule, load_onnx, load_torchscript, to_numpy, to_tensor, torch_dtype
from .torch_options import TorchOptions

log = logging.getLogger(__name__)


def device_for(spec: InstanceSpec) -> torch.device:
    """The torch device of an instance; a KIND_GPU instance without a usable CUDA device fails to load."""
    if spec.kind != "GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ModelLoadError(
            f"instance '{spec.name}' is KIND_GPU but torch {torch.__version__} has no usable CUDA device "
            "(torch.cuda.is_available() is False); use KIND_CPU or KIND_AUTO"
        )
    count = torch.cuda.device_count()
    if spec.device_id >= count:
        raise ModelLoadError(f"instance '{spec.name}' asks for GPU {spec.device_id} but torch sees {count} GPU(s)")
    return torch.device("cuda", spec.device_id)


def cap_torch_threads(cores: int) -> None:
    """Keep torch's intra-op pool within the usable cores: the pool is process-wide (shared by every
    CPU instance), and its default counts the machine's cores, not a container's CPU quota."""
    if torch.get_num_threads() > cores:
        torch.set_num_threads(cores)


@dataclass(slots=True)
class Launch:
    """A batch enqueued on a GPU instance: the pinned views its outputs are copied into, the event
    recorded after those copies, its inputs (kept alive until the device has read them), and the
    outputs it keeps on the device (``Instance.compute_keeping``)."""

    copies: dict[str, torch.Tensor]
    done: torch.cuda.Event
    inputs: list[torch.Tensor]
    held: dict[str, torch.Tensor]


class PyTorchInstance(Instance):
    """One module on one device. ``compute`` is called from the scheduler's worker thread for this instance."""

    takes_device_inputs = True

    def __init__(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> None:
        self.spec = spec
        self.options = TorchOptions.from_config(config)
        self._device = device_for(spec)
        self.device = str(self._device)
        self._cuda = self._device.type == "cuda"
        if not self._cuda:
            cap_torch_threads(usable_cores())
        with self._device_context(), CUDA_SETUP_LOCK if self._cuda else contextlib.nullcontext():
            loaded = (
                load_onnx(model_file)
                if self.options.convert_from == "onnx"
                else load_torchscript(model_file, config, self._device)
            )
            self.io: ModelIO = loaded.io
            self._module = self._prepare_module(loaded)
            self._inputs = [(name, torch_dtype(self._info(name))) for name in loaded.input_order]
            self._outputs = {info.name: torch_dtype(info) for info in self.io.outputs}
            self._output_order = loaded.output_order
            self._batched = config.max_batch_size > 0
            self._stream = torch.cuda.Stream(self._device) if self._cuda else None
            self._copies = torch.cuda.Stream(self._device) if self._cuda else None  # eager host-to-device copies
            self.overlaps_batches = self._cuda
            if self._cuda:
                torch.cuda.synchronize(self._device)  # weights were copied on the default stream
            # one set of pinned input and output buffers per batch in flight (``slot``)
            self._staging: list[dict[str, torch.Tensor]] = [{} for _ in range(BATCHES_IN_FLIGHT)]
            self._host_outputs = [
                HostBuffers(pinned=self._cuda and self.options.pinned_output) for _ in range(BATCHES_IN_FLIGHT)
            ]
            if self._cuda and self.options.pinned_input:
                self._preallocate(max(1, config.max_batch_size))
            self._graphs = self._capture_graphs() if self.options.cuda_graphs else None

    # --- loading ------------------------------------------------------------------------------

    def _info(self, name: str) -> Any:
        return next(info for info in self.io.inputs if info.name == name)

    def _prepare_module(self, loaded: LoadedModule) -> torch.nn.Module:
        module = loaded.module.to(self._device).eval()
        if self.options.precision == "fp16":
            module = module.half()
        return module

    def _preallocate(self, max_batch: int) -> None:
        """Pinned staging buffers (every set) for inputs of fixed size, so the first batches need no allocation."""
        for name, dtype in self._inputs:
            dims = self._info(name).shape[1:] if self._batched else self._info(name).shape
            if all(d is not None for d in dims):
                count = (max_batch if self._batched else 1) * int(np.prod(dims, dtype=np.int64))
                for staging in self._staging:
                    staging[name] = torch.empty(count * dtype.itemsize, dtype=torch.uint8, pin_memory=True)

    def _capture_graphs(self) -> CudaGraphs | None:
        if not self._cuda:
            log.info("instance '%s': CUDA graphs apply to GPU instances only; running eagerly", self.spec.name)
            return None
        if not self._batched:
            log.warning(
                "instance '%s': CUDA graphs need a batch dimension (max_batch_size > 0); running eagerly",
                self.spec.name,
            )
            return None
        shapes = [(self._info(name).shape[1:], dtype) for name, dtype in self._inputs]
        if any(d is None for dims, _ in shapes for d in dims):
            log.warning(
                "instance '%s': CUDA graphs need fixed input dims besides the batch; running eagerly", self.spec.name
            )
            return None
        assert self._stream is not None
        try:
            with self._grad_mode():
                return CudaGraphs(self._forward, shapes, self.options.graph_batch_sizes, self._device, self._stream)
        except Exception as exc:  # e.g. a model that synchronises with the host cannot be captured
            log.warning(
                "instance '%s': CUDA graph capture failed (%s: %s); running eagerly",
                self.spec.name,
                type(exc).__name__,
                exc,
            )
            return None

    # --- execution ----------------------------------------------------------------------------

    def _device_context(self) -> contextlib.AbstractContextManager:
        return torch.cuda.device(self._device) if self._cuda else contextlib.nullcontext()

    def _grad_mode(self) -> contextlib.AbstractContextManager:
        return torch.inference_mode() if self.options.inference_mode else torch.no_grad()

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.options.precision != "autocast_fp16":
            return contextlib.nullcontext()
        # No weight-cast cache: a cache filled during CUDA graph capture would be freed under the graph.
        return torch.autocast(device_type=self._device.type, dtype=torch.float16, cache_enabled=False)

    def _forward(self, tensors: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run the module on device tensors; outputs named and in their declared types."""
        if self.options.precision == "fp16":
            tensors = [t.half() if t.is_floating_point() else t for t in tensors]
        with self._autocast(), torch.jit.optimized_execution(self.options.optimized_execution):
            result = self._module(*tensors)
        return self._name_outputs(result)

    def _name_outputs(self, result: Any) -> dict[str, torch.Tensor]:
        if isinstance(result, torch.Tensor):
            named = {self._output_order[0]: result}
        elif isinstance(result, dict):
            named = result
        elif isinstance(result, list | tuple):
            named = dict(zip(self._output_order, result, strict=False))
        else:
            raise FerryError(f"the model returned {type(result).__name__}; expected a tensor, tuple, list or dict")
        out: dict[str, torch.Tensor] = {}
        for name, dtype in self._outputs.items():
            tensor = named.get(name)
            if not isinstance(tensor, torch.Tensor):
                raise FerryError(
                    f"the model returned no tensor for output '{name}' "
                    f"(outputs bind in the order {', '.join(self._output_order)})"
                )
            if tensor.dtype != dtype:
                if not (tensor.is_floating_point() and dtype.is_floating_point):
                    raise FerryError(f"output '{name}' is {tensor.dtype} but the config declares {dtype}")
                tensor = tensor.to(dtype)  # e.g. FP16 / autocast results back to the declared FP32
            out[name] = tensor
        return out

    def compute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        return self._compute(inputs, outputs, frozenset())

    def compute_keeping(self, inputs: dict[str, Any], outputs: list[str], kept: frozenset[str]) -> dict[str, Any]:
        return self._compute(inputs, outputs, kept)

    def _compute(self, inputs: dict[str, Any], outputs: list[str], kept: frozenset[str]) -> dict[str, Any]:
        if self._cuda:
            return self.finish(self.launch(inputs, outputs, 0, kept))
        self._check(inputs)
        with self._grad_mode():
            tensors = [self._on_cpu(inputs[name], dtype) for name, dtype in self._inputs]
            results = self._forward(tensors)
            # a kept output is a tensor of its own (an eager output may view an input's memory)
            return {
                name: results[name].clone(memory_format=torch.contiguous_format)
                if name in kept
                else to_numpy(results[name].contiguous())
                for name in outputs
            }

    def _check(self, inputs: dict[str, Any]) -> None:
        missing = [name for name, _ in self._inputs if name not in inputs]
        if missing:
            raise InvalidArgument(f"input '{missing[0]}' is required by this model")

    def launch(
        self, inputs: dict[str, Any], outputs: list[str], slot: int = 0, kept: frozenset[str] = frozenset()
    ) -> Launch:
        """Enqueue a batch on this GPU instance's streams (copies in, replay or forward pass, copies
        out into buffer set ``slot``'s pinned outputs, or into device memory of their own for the
        outputs ``kept`` there) and return without waiting (see backends.base.Instance.launch). The
        other set's batch may still be in flight."""
        self._check(inputs)
        assert self._stream is not None, "launch is for GPU instances (overlaps_batches)"
        with self._grad_mode(), self._device_context(), torch.cuda.stream(self._stream):
            host = [self._stage(name, inputs[name], dtype, slot) for name, dtype in self._inputs]
            # device inputs were joined on the scheduler's thread, which sets no stream (the
            # pre-processor's own lane was synchronised): read them after its default stream
            after = torch.cuda.default_stream(self._device) if any(t.is_cuda for t in host) else None
            if after is not None:
                self._stream.wait_stream(after)
            batch = host[0].shape[0] if self._batched and host else 0
            if self._graphs is not None and self._graphs.accepts(host, batch):
                device_outputs = self._graphs.compute(host, batch, after)
            else:
                device_outputs = self._forward(self._to_device(host))
            copies = {
                name: self._host_outputs[slot].stage(name, device_outputs[name]) for name in outputs if name not in kept
            }
            # kept outputs stay on the device, in memory of their own (a graph's outputs serve its next replay)
            held = {
                name: device_outputs[name].clone(memory_format=torch.contiguous_format)
                for name in outputs
                if name in kept
            }
            done = torch.cuda.Event()
            done.record(self._stream)
        return Launch(copies, done, host, held)

    def finish(self, launched: Launch) -> dict[str, Any]:
        """Wait for a launched batch's outputs (its event; the GIL is released meanwhile) and copy
        them out of the pinned buffers, which serve the batch after next; kept ones as they are."""
        launched.done.synchronize()
        return {name: to_numpy(view).copy() for name, view in launched.copies.items()} | launched.held

    def _to_device(self, host: list[torch.Tensor]) -> list[torch.Tensor]:
        """An eager batch's inputs on the device: host tensors copied on the copy stream, so the copy
        runs while the batch launched before computes; the compute stream waits for it."""
        assert self._stream is not None and self._copies is not None
        with torch.cuda.stream(self._copies):
            tensors = [t.to(self._device, non_blocking=True) for t in host]
            copied = torch.cuda.Event()
            copied.record(self._copies)
        self._stream.wait_event(copied)
        for tensor in tensors:
            tensor.record_stream(self._stream)  # made on the copy stream, freed after the compute stream used it
        return tensors

    def _on_cpu(self, array: np.ndarray | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A CPU instance's input: a host array shared as a tensor, a device tensor brought here."""
        if isinstance(array, torch.Tensor):
            return array.to(self._device)
        return to_tensor(_writable(array), dtype)

    def _stage(self, name: str, array: np.ndarray | torch.Tensor, dtype: torch.dtype, slot: int) -> torch.Tensor:
        """The input as a host tensor in set ``slot``'s pinned memory (copied there unless the
        scheduler assembled it there), or a device tensor as it is (a device pre-processor's batch)."""
        if isinstance(array, torch.Tensor):
            return array
        if not self.options.pinned_input:
            return to_tensor(np.ascontiguousarray(array), dtype)
        buffer = self._staging[slot].get(name)
        owned = (
            buffer is not None
            and array.flags.c_contiguous
            and array.__array_interface__["data"][0] == buffer.data_ptr()
        )
        if not owned:
            view = self.input_buffer(name, array.shape, array.dtype, slot)
            assert view is not None
            np.copyto(view, array)
            buffer = self._staging[slot][name]
        assert buffer is not None
        return buffer[: array.nbytes].view(dtype).view(array.shape)

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype, slot: int = 0) -> np.ndarray | None:
        """A view of this instance's pinned staging buffer for ``name`` in set ``slot`` (see
        backends.base.Instance.input_buffer).

        The scheduler assembles a batch in a set only once the batch launched before in that set
        is finished (two in flight at most, sets taken in turn), so the device has read it by then.
        """
        if not (self._cuda and self.options.pinned_input) or dtype.hasobject:
            return None
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        staging = self._staging[slot]
        buffer = staging.get(name)
        if buffer is None or buffer.numel() < nbytes:
            buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True)
            staging[name] = buffer
        return buffer[:nbytes].numpy().view(dtype).reshape(shape)

    def close(self) -> None:
        self._graphs = None
        for staging, outputs in zip(self._staging, self._host_outputs, strict=True):
            staging.clear()
            outputs.clear()
        del self._module
        if self._cuda:
            with CUDA_SETUP_LOCK:
                torch.cuda.empty_cache()


def _writable(array: np.ndarray) -> np.ndarray:
    """Request tensors decoded from immutable wire bytes are read-only; torch may not alias those."""
    return array if array.flags.writeable else array.copy()


class PyTorchBackend(Backend):
    platform = "pytorch_libtorch"
    name = "pytorch"
    default_filename = "model.pt"

    def model_filename(self, config: mc.ModelConfig) -> str:
        return TorchOptions.from_config(config).model_filename(config)

    def gpu_available(self) -> bool:
        return torch.cuda.is_available()

    def create_instance(self, model_file: Path, config: mc.ModelConfig, spec: InstanceSpec) -> PyTorchInstance:
        return PyTorchInstance(model_file, config, spec)
