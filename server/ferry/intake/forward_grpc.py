"""TEMPORARY (replaced by the forward branch)."""

from __future__ import annotations

from ..api.grpc import InferenceServicer


class ForwardingServicer(InferenceServicer):
    def __init__(self, plane, max_response_bytes, channel) -> None:
        super().__init__(plane, max_response_bytes)
        self._channel = channel
