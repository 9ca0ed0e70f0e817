"""Ferry's ``triton_python_backend_utils``: the module Triton Python models import as ``pb_utils``.

It offers the names and semantics of Triton's Python-backend API (tensors, requests, responses,
errors, calls to other models, auto-complete of the config), so a ``model.py`` written for Triton
runs unchanged. Tensors are plain numpy arrays here: nothing is copied into shared memory.
Calls to other models (``InferenceRequest.exec``) go through a caller that the hosting side
installs: the server's data plane in-process (``python_backend.host``), or the parent server from an
isolated child (``python_backend.child``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ferry_client.codec import decode_bytes_elements, encode_bytes_elements

from .custom_metrics import Metric, MetricFamily  # noqa: F401 - Triton models use pb_utils.MetricFamily

_log = logging.getLogger("ferry.python_model")

# Triton's config DataType enum: TYPE_BOOL = 1 ... TYPE_STRING = 13 (BF16 has no numpy type).
_NUMPY_BY_TRITON_TYPE: dict[int, type] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
_TYPE_NAMES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32")
TRITON_STRING_TO_NUMPY: dict[str, type] = {
    **{f"TYPE_{name}": _NUMPY_BY_TRITON_TYPE[i + 1] for i, name in enumerate(_TYPE_NAMES)},
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


def triton_to_numpy_type(data_type: int) -> type | None:
    """The numpy type of a Triton config data type number (``TYPE_FP32`` is 11)."""
    return _NUMPY_BY_TRITON_TYPE.get(data_type)


_TRITON_TYPE_BY_DTYPE: dict[np.dtype, int] = {np.dtype(t): n for n, t in _NUMPY_BY_TRITON_TYPE.items()}


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The Triton config data type number of a numpy type; bytes and objects are TYPE_STRING (13)."""
    dtype = data_type if isinstance(data_type, np.dtype) else np.dtype(data_type)
    if dtype.kind == "S":
        return 13
    return _TRITON_TYPE_BY_DTYPE.get(dtype)


def triton_string_to_numpy(triton_type_string: str) -> type:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray | None:
    """BYTES elements as length-prefixed bytes in one uint8 array (Triton's wire layout)."""
    if input_tensor.size == 0:
        return None
    return np.frombuffer(encode_bytes_elements(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The inverse of :func:`serialize_byte_tensor`: a 1-D object array of ``bytes``."""
    data = bytes(encoded_tensor)
    count, offset = 0, 0
    while offset < len(data):
        offset += 4 + int.from_bytes(data[offset : offset + 4], "little")
        count += 1
    return decode_bytes_elements("bytes", data, count)


class TritonError:
    """An error to return in an :class:`InferenceResponse`; its code picks the status the caller sees."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = UNKNOWN) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by the API on misuse; raised from ``execute`` it fails the requests of that batch."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class Tensor:
    """A named tensor; holds the numpy array itself (no copy)."""

    def __init__(self, name: str, numpy_array: Any, triton_dtype: int | None = None) -> None:
        array = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        if array.dtype.kind in ("U", "V"):
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} is not supported; use np.object_ (of bytes) for strings"
            )
        if triton_dtype is not None:
            wanted = triton_to_numpy_type(triton_dtype)
            if wanted is None:
                raise TritonModelException(f"tensor '{name}': unknown Triton data type {triton_dtype}")
            if array.dtype != np.dtype(wanted):
                array = array.view(wanted)
        else:
            triton_dtype = numpy_to_triton_type(array.dtype)
            if triton_dtype is None:
                raise TritonModelException(f"tensor '{name}': numpy dtype {array.dtype} has no Triton data type")
        self._name = name
        self._array = array
        self._triton_dtype = triton_dtype

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def triton_dtype(self) -> int:
        return self._triton_dtype

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the data (numeric tensors), for torch.from_dlpack and friends."""
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor sharing the memory of an object with ``__dlpack__`` (a CPU torch tensor, an array)."""
        return Tensor(name, np.from_dlpack(tensor))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


class InferenceResponse:
    """The response to one request: output tensors, or an error that fails just that request."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if output_tensors is not None and not isinstance(output_tensors, (list, tuple)):
            raise TritonModelException("InferenceResponse: 'output_tensors' must be a list of Tensor")
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


#: Runs a call to another model. Installed by the host (see ``python_backend.host`` and ``python_backend.child``).
Caller = Callable[["InferenceRequest"], InferenceResponse]
AsyncCaller = Callable[["InferenceRequest"], Awaitable[InferenceResponse]]
StreamCaller = Callable[["InferenceRequest"], Iterator[InferenceResponse]]
_caller: Caller | None = None
_async_caller: AsyncCaller | None = None
_stream_caller: StreamCaller | None = None


def _install_caller(
    caller: Caller | None, async_caller: AsyncCaller | None = None, stream_caller: StreamCaller | None = None
) -> None:
    """Set how ``exec`` and ``async_exec`` reach other models (called by Ferry, not by models)."""
    global _caller, _async_caller, _stream_caller
    _caller, _async_caller, _stream_caller = caller, async_caller, stream_caller


class InferenceRequest:
    """A request: either one that ``execute`` received, or one a model builds to call another model."""

    def __init__(
        self,
        model_name: str | bytes = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        timeout: int = 0,
        model_version: int = -1,
        parameters: dict[str, Any] | str | None = None,
        preferred_memory: Any = None,
        trace: Any = None,
    ) -> None:
        # Triton accepts the name as bytes too (models written for Python 2 era APIs pass b"name")
        self.model_name = model_name.decode() if isinstance(model_name, (bytes, bytearray)) else model_name
        self.model_version = model_version
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        self._sender: InferenceResponseSender | None = None  # set by Ferry for a decoupled model's requests

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        """Whether the client gave up on this (decoupled) request: stop sending."""
        return self._sender is not None and self._sender.is_cancelled()

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of a decoupled model's responses to this request (any number, from any thread)."""
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() needs a decoupled model: set 'model_transaction_policy { decoupled: true }'"
            )
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of the server and wait; errors come back in the response.

        With ``decoupled=True``: an iterator over the called model's responses as they come (the
        last one is flagged final; an empty one when the model ended without data)."""
        if decoupled:
            if _stream_caller is None:
                raise TritonModelException(
                    "InferenceRequest.exec(decoupled=True) needs a python model running in a Ferry server's process"
                )
            return _stream_caller(self)
        if _caller is None:
            raise TritonModelException("InferenceRequest.exec() is only available inside a running Ferry server")
        return _caller(self)

    def async_exec(self, decoupled: bool = False) -> Awaitable[Any]:
        """Like :meth:`exec`, as an awaitable for ``async def execute`` (decoupled: all responses, in order)."""
        if decoupled:
            return asyncio.get_running_loop().run_in_executor(None, lambda: list(self.exec(decoupled=True)))
        if _async_caller is not None:
            return _async_caller(self)
        return asyncio.get_running_loop().run_in_executor(None, self.exec)


class InferenceResponseSender:
    """Sends a decoupled model's responses to one request (Triton's ``InferenceResponseSender``).

    ``send(response, flags)``: any number of responses, from any thread; the one sent with
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (with or without a response) ends the request, and the
    sender is closed after it."""

    def __init__(
        self, deliver: Callable[[InferenceResponse | None, bool], None], cancelled: Callable[[], bool]
    ) -> None:
        self._deliver = deliver
        self._cancelled = cancelled
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException(
                "send(): a response is required unless flags is TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"send(): expected an InferenceResponse, got {type(response).__name__}")
        with self._lock:  # one response at a time, in the order the model sends them
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = final
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        return self._cancelled()

    @property
    def closed(self) -> bool:
        return self._closed


class ModelConfig:
    """What ``auto_complete_config`` receives and returns: the model config as a dict, editable."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self._config = model_config

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0))
        if current and current != max_batch_size and self._config.get("input"):
            raise TritonModelException(
                f"auto_complete_config: max_batch_size is {current} in the config; cannot change it to {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._config.setdefault("model_transaction_policy", {}).update(transaction_policy_dict)

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's parameter name
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        if "name" not in tensor:
            raise TritonModelException(f"auto_complete_config: add_{kind} needs a 'name'")
        tensors = self._config.setdefault(kind, [])
        existing = next((t for t in tensors if t.get("name") == tensor["name"]), None)
        if existing is None:
            tensors.append(dict(tensor))
            return
        for key in ("data_type", "dims"):
            if key in tensor and existing.get(key) and _same(existing[key], tensor[key]) is False:
                raise TritonModelException(
                    f"auto_complete_config: {kind} '{tensor['name']}' has {key} {existing[key]} in the config, "
                    f"not {tensor[key]}"
                )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return [int(x) for x in a] == [int(x) for x in b]
    return a == b


class Logger:
    """Triton's model logger, writing to the server log."""

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        _log.log(level, message)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug(message)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the model config (as ``initialize`` gets it, parsed) makes the model decoupled."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
