"""What the inference front doors (REST ``/infer``, gRPC ``ModelInfer``) need from a data plane.

The model process's ``DataPlane`` has it, and so has an intake process's plane, which admits and
checks requests itself and runs them in the model process: both front doors take either.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from ..errors import FerryError
from ..security.identity import Identify
from ..types import InferenceRequest, InferenceResponse
from ..workers import Workers
from .admission import Admission, Ticket
from .limits import Limits
from .received_body import ReceivedBody
from .stream_limits import StreamLimits


class InferencePlane(Protocol):
    admission: Admission
    limits: Limits
    identify: Identify  # who a caller is (its bearer token): requests carry it to shared memory
    stream_limits: StreamLimits  # open streamed requests per gRPC stream and client address
    workers: Workers  # the process's pools: the codec pool parses and encodes large messages

    async def infer(self, request: InferenceRequest, door: str = ...) -> InferenceResponse:
        """One response; ``door`` names the endpoint in the error a decoupled model gets."""
        ...

    def receive_body(self, nbytes: int, json_bytes: int, ticket: Ticket) -> ReceivedBody:
        """Memory for a REST body of ``nbytes`` (``json_bytes`` of them its JSON header, when its
        binary section follows), counted on ``ticket`` before it is allocated, where the request
        will be served from (``api/received_body.py``)."""
        ...

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether requests to this model stream (False when it cannot serve: its request says why)."""
        ...

    def infer_stream(
        self, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | FerryError, bool], None]:
        """Every response of one request, each with whether it is the final one."""
        ...
