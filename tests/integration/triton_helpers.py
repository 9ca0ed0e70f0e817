"""Protocol-neutral wrappers over the official tritonclient, so each test runs over HTTP and gRPC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

# The status each protocol reports for one failure class.
STATUS = {
    "http": {"invalid": "400", "not_found": "404", "unavailable": "503"},
    "grpc": {
        "invalid": "StatusCode.INVALID_ARGUMENT",
        "not_found": "StatusCode.NOT_FOUND",
        "unavailable": "StatusCode.UNAVAILABLE",
    },
}


@dataclass
class Triton:
    protocol: str
    module: Any
    client: Any

    def inputs(
        self, arrays: dict[str, np.ndarray], datatypes: dict[str, str] | None = None, binary: bool = True
    ) -> list:
        made = []
        for name, array in arrays.items():
            datatype = (datatypes or {}).get(name) or _datatype(array)
            tensor = self.module.InferInput(name, list(array.shape), datatype)
            if self.protocol == "http":
                tensor.set_data_from_numpy(array, binary_data=binary)
            else:
                tensor.set_data_from_numpy(array)
            made.append(tensor)
        return made

    def outputs(self, names: list[str], binary: bool = True) -> list:
        if self.protocol == "http":
            return [self.module.InferRequestedOutput(n, binary_data=binary) for n in names]
        return [self.module.InferRequestedOutput(n) for n in names]

    def infer(
        self,
        model: str,
        arrays: dict[str, np.ndarray],
        outputs: list[str] | None = None,
        binary: bool = True,
        datatypes: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        requested = self.outputs(outputs, binary) if outputs is not None else None
        return self.client.infer(model, self.inputs(arrays, datatypes, binary), outputs=requested, **kwargs)

    def expect_error(self, kind: str, fragment: str, call, *args: Any, **kwargs: Any) -> str:
        """Run a call that must fail with the given class and a message containing ``fragment``."""
        try:
            call(*args, **kwargs)
        except InferenceServerException as exc:
            assert str(exc.status()) == STATUS[self.protocol][kind], (exc.status(), exc.message())
            assert fragment in exc.message(), exc.message()
            return exc.message()
        raise AssertionError(f"expected a {kind} error containing {fragment!r}")


def _datatype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


def connect(protocol: str, server) -> Triton:
    if protocol == "http":
        return Triton("http", thttp, thttp.InferenceServerClient(server.http_url, network_timeout=60))
    return Triton("grpc", tgrpc, tgrpc.InferenceServerClient(server.grpc_url))
