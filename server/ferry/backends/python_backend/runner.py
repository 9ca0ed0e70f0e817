"""Loads one ``model.py`` and runs the batches the scheduler forms through its ``execute``.

Used the same way in the server process and in an isolated child, so both behave alike: the model
gets Triton's ``args``, ``execute`` gets one ``InferenceRequest`` per queued request, and every
response is checked (count, names, datatypes, batch size) and turned into numpy outputs or a
``Failure`` that fails that request alone. Nothing here raises past ``execute``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ferry_client.codec import datatype_from_config, numpy_dtype

from ...errors import ErrorKind, FerryError
from ...response_streams import StreamedResponse
from . import triton_python_backend_utils as pb_utils

UTILS_MODULE = "triton_python_backend_utils"
_module_ids = itertools.count()

#: pb_utils.TritonError codes -> the names of Ferry's error kinds (see ferry.errors.ErrorKind).
ERROR_KIND_BY_CODE = {
    pb_utils.TritonError.UNKNOWN: "INTERNAL",
    pb_utils.TritonError.INTERNAL: "INTERNAL",
    pb_utils.TritonError.NOT_FOUND: "NOT_FOUND",
    pb_utils.TritonError.INVALID_ARG: "INVALID_ARGUMENT",
    pb_utils.TritonError.UNAVAILABLE: "UNAVAILABLE",
    pb_utils.TritonError.UNSUPPORTED: "UNIMPLEMENTED",
    pb_utils.TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    pb_utils.TritonError.CANCELLED: "CANCELLED",
}


@dataclass(frozen=True)
class Failure:
    """One request's failure, picklable so an isolated child can send it back."""

    message: str
    kind: str = "INTERNAL"


Outputs = dict[str, np.ndarray]


class ModelLoadFailure(Exception):
    """``model.py`` could not be imported, completed or initialised; the message says why."""


def import_model_file(model_file: Path) -> ModuleType:
    """Import ``model.py`` under a name of its own, with ``triton_python_backend_utils`` importable."""
    sys.modules.setdefault(UTILS_MODULE, pb_utils)
    name = f"ferry_python_model_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, model_file)
    if spec is None or spec.loader is None:
        raise ModelLoadFailure(f"cannot import {model_file.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered, as imports are: dataclasses and pickle look modules up
    try:
        spec.loader.exec_module(module)
        if not inspect.isclass(getattr(module, "TritonPythonModel", None)):
            raise ModelLoadFailure(f"{model_file.name} defines no class TritonPythonModel")
    except ModelLoadFailure:
        del sys.modules[name]
        raise
    except BaseException as exc:
        del sys.modules[name]
        raise ModelLoadFailure(f"importing {model_file.name} failed: {_describe(exc)}") from None
    return module


def auto_complete(model_class: type, config: dict[str, Any]) -> dict[str, Any]:
    """Run the optional ``auto_complete_config`` hook on the config dict; returns the completed dict."""
    hook = getattr(model_class, "auto_complete_config", None)
    if hook is None:
        return config
    try:
        completed = hook(pb_utils.ModelConfig(config))
    except BaseException as exc:
        raise ModelLoadFailure(f"auto_complete_config failed: {_describe(exc)}") from None
    if not isinstance(completed, pb_utils.ModelConfig):
        raise ModelLoadFailure("auto_complete_config must return the ModelConfig it was given")
    return completed.as_dict()


class ModelRunner:
    """One instance of a Python model: the user's object, plus what checking its answers needs."""

    def __init__(self, model_file: Path, config: dict[str, Any], args: dict[str, str]) -> None:
        module = import_model_file(model_file)
        self.module_name = module.__name__
        try:
            self._load(module, config, args)
        except ModelLoadFailure:
            sys.modules.pop(self.module_name, None)
            raise

    def _load(self, module: ModuleType, config: dict[str, Any], args: dict[str, str]) -> None:
        self.config = auto_complete(module.TritonPythonModel, config)
        self.name = args["model_name"]
        self.batched = int(self.config.get("max_batch_size", 0)) > 0
        self.output_dtypes = _output_dtypes(self.config)
        try:
            self.model = module.TritonPythonModel()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                initialize({**args, "model_config": json.dumps(self.config)})
        except BaseException as exc:
            raise ModelLoadFailure(f"initialize failed: {_describe(exc)}") from None
        self._async = inspect.iscoroutinefunction(self.model.execute)
        self._loop: asyncio.AbstractEventLoop | None = None

    def execute(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        """Run one batch (one entry per request); a failure fails only the requests it concerns."""
        requests = self._requests(inputs, outputs, parameters)
        try:
            responses = self._call_execute(requests)
        except BaseException as exc:
            failure = Failure(f"python model '{self.name}' execute() raised {_describe(exc)}")
            return [failure] * len(requests)
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            count = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            failure = Failure(
                f"python model '{self.name}' execute() returned {count} responses for {len(requests)} requests"
            )
            return [failure] * len(requests)
        return [
            self._check(response, request, names)
            for response, request, names in zip(responses, inputs, outputs, strict=True)
        ]

    def execute_decoupled(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        sinks: list[Any],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[Outputs | Failure]:
        """Run one batch of a decoupled model: each request gets a response sender whose responses
        go to that request's sink (a ``response_streams.ResponseStream``), now or later, from any
        thread. Returns once ``execute`` has returned: ``{}`` for a request that is answered through
        its sender, a Failure for one that ``execute`` failed before anything was sent."""
        requests = self._requests(inputs, outputs, parameters)
        for call, request, names, sink in zip(requests, inputs, outputs, sinks, strict=True):
            call._sender = pb_utils.InferenceResponseSender(
                self._deliverer(sink, request, names), functools.partial(getattr, sink, "cancelled")
            )
        try:
            returned = self._call_execute(requests)
        except BaseException as exc:
            return self._end_unanswered(
                requests, sinks, f"python model '{self.name}' execute() raised {_describe(exc)}"
            )
        if returned is not None:
            return self._end_unanswered(
                requests,
                sinks,
                f"python model '{self.name}' is decoupled: execute() must return None and send responses "
                f"through request.get_response_sender() (it returned {type(returned).__name__})",
            )
        return [{} for _ in requests]

    def _requests(
        self,
        inputs: list[dict[str, np.ndarray]],
        outputs: list[list[str]],
        parameters: list[dict[str, Any]] | None = None,
    ) -> list[pb_utils.InferenceRequest]:
        """The model's ``InferenceRequest`` per request: its tensors, asked outputs and parameters."""
        return [
            pb_utils.InferenceRequest(
                model_name=self.name,
                inputs=[pb_utils.Tensor(name, array) for name, array in request.items()],
                requested_output_names=names,
                parameters=parameters[index] if parameters is not None else None,
            )
            for index, (request, names) in enumerate(zip(inputs, outputs, strict=True))
        ]

    def _deliverer(self, sink: Any, inputs: dict[str, np.ndarray], names: list[str]) -> Any:
        def deliver(response: pb_utils.InferenceResponse | None, final: bool) -> None:
            sent = time.perf_counter_ns()  # checking the outputs is part of the response's output time
            if response is None:
                sink.put(StreamedResponse({}, None, final, sent))
                return
            checked = self._check(response, inputs, names)
            if isinstance(checked, Failure):
                sink.put(StreamedResponse({}, FerryError(checked.message, ErrorKind[checked.kind]), final, sent))
            else:
                sink.put(StreamedResponse(checked, None, final, sent))

        return deliver

    @staticmethod
    def _end_unanswered(
        requests: list[pb_utils.InferenceRequest], sinks: list[Any], message: str
    ) -> list[Outputs | Failure]:
        """execute() failed: a request with no response yet fails; one already streaming ends with the error."""
        results: list[Outputs | Failure] = []
        for request, sink in zip(requests, sinks, strict=True):
            sender = request._sender
            assert sender is not None
            with sender._lock:  # no send slips in between the check and the close
                unanswered = sink.responses == 0 and not sender.closed
                if unanswered:
                    sender._closed = True  # later sends from the model's threads are refused
            if unanswered:
                results.append(Failure(message))
                continue
            if not sink.finished:
                sink.put(StreamedResponse({}, FerryError(message), final=True))
            results.append({})
        return results

    def _call_execute(self, requests: list[pb_utils.InferenceRequest]) -> Any:
        if not self._async:
            return self.model.execute(requests)
        if self._loop is None:  # one loop per instance, reused by every batch
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.model.execute(requests))

    def _check(self, response: Any, inputs: dict[str, np.ndarray], names: list[str]) -> Outputs | Failure:
        if not isinstance(response, pb_utils.InferenceResponse):
            return Failure(
                f"python model '{self.name}' execute() returned {type(response).__name__}, not InferenceResponse"
            )
        error = response.error()
        if error is not None:
            return Failure(error.message(), ERROR_KIND_BY_CODE.get(error.code(), "INTERNAL"))
        given = {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}
        batch = next(iter(inputs.values())).shape[0] if self.batched and inputs else None
        result: Outputs = {}
        for name in names:
            if name not in given:
                continue  # as Triton: the outputs that exist go back; a caller that asked for this one fails
            array = given[name]
            expected = self.output_dtypes.get(name)
            if expected is not None and expected.kind == "O" and array.dtype.kind in ("S", "O"):
                array = array.astype(object, copy=False)
            elif expected is not None and array.dtype != expected and not _fits(array, expected):
                return Failure(
                    f"python model '{self.name}' output '{name}' has numpy dtype {array.dtype}, "
                    f"but the config declares {expected}"
                )
            if expected is not None and array.dtype != expected and expected.kind != "O":
                array = array.astype(expected)  # every value fits (np.array([3]) is int64; the config says INT32)
            if batch is not None and array.shape[:1] != (batch,):
                return Failure(
                    f"python model '{self.name}' output '{name}' has shape {list(array.shape)}; "
                    f"its first dimension must be the request's batch size {batch}"
                )
            result[name] = array
        return result

    def finalize(self) -> None:
        finalize = getattr(self.model, "finalize", None)
        try:
            if finalize is not None:
                finalize()
        finally:
            if self._loop is not None:
                self._loop.close()
            sys.modules.pop(self.module_name, None)


def _output_dtypes(config: dict[str, Any]) -> dict[str, np.dtype]:
    """The numpy dtype of each declared output (one without a valid type is refused at load later)."""
    dtypes = {}
    for tensor in config.get("output", []):
        try:
            dtypes[tensor["name"]] = numpy_dtype(datatype_from_config(tensor.get("data_type", "")))
        except (KeyError, ValueError):
            continue
    return dtypes


def _fits(array: np.ndarray, dtype: np.dtype) -> bool:
    """Whether a numeric output converts to the declared numeric type without changing a value
    (Triton's own examples return ``np.array([n])``, int64, for an INT32 output)."""
    if array.dtype.kind not in "biuf" or dtype.kind not in "biuf":
        return False
    with np.errstate(all="ignore"):
        return bool(np.array_equal(array.astype(dtype), array))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
