"""Bounds on streamed requests (requests to decoupled models) per gRPC stream and per client address.

A request to a decoupled model stays open, holding its admission slot, its producer (the model's
thread) and a share of the event loop, until its last response, and the client sets that pace.
The server-wide caps alone let one client hold them all: one ``ModelStreamInfer`` sending 1,030
requests and reading one answer a second held every in-flight slot (others got 503 "server
overloaded"), and the per-peer call cap (``grpc_calls.CallGuard``) did not see it: that was one
call. So, at the front doors:

- one gRPC stream may have ``per_stream`` decoupled requests open (``--grpc-max-stream-requests``);
- one client address may have ``per_peer`` streamed requests open in this process, over all its
  gRPC streams and REST ``generate`` / ``generate_stream`` calls (``--max-streamed-requests-per-peer``);

and the data plane bounds them server-wide (``DataPlane.infer_stream``, ``--max-streamed-requests``),
below the in-flight cap, so streams never take the slots other requests need. Past a bound the
request is refused at once with RESOURCE_EXHAUSTED (429), naming the limit; a gRPC stream goes on
(its other requests are not touched). Calls of this server's own intake processes (no peer
address) are not counted here: each intake counts its own clients.

An intake process relays REST requests it does not serve (``generate`` among them) to the model
process over a unix socket; it names the client's address in ``PEER_HEADER`` (replacing any the
client sent), which the model process believes only from that socket (``rest_peer``), so REST
streamed requests are counted per address across the intakes.

Everything runs on the event loop, so plain dicts are the state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..errors import ErrorKind, FerryError
from ..response_pacing import ResponsePacer

#: The header an intake process names its client's address in, for the model process.
PEER_HEADER = "x-ferry-peer"


def rest_peer(client: tuple[str, int] | None, headers: Mapping[str, str]) -> str:
    """A REST request's client address: its own, or (relayed by an intake over the unix socket,
    which has none) the one the intake named."""
    if client is not None:
        return client[0]
    return headers.get(PEER_HEADER, "")


class StreamLimits:
    """Counts the open streamed requests of each client address; refuses those past the bounds."""

    def __init__(self, per_stream: int = 128, per_peer: int = 256) -> None:
        self.per_stream = per_stream
        self.per_peer = per_peer
        self.open: dict[str, int] = {}
        self.rejected = 0

    def enter(self, peer: str, in_stream: int = 0) -> Callable[[], None]:
        """Count one more open streamed request of ``peer`` (``in_stream``: how many its gRPC stream
        already has open); returns what uncounts it (once). Raises RESOURCE_EXHAUSTED past a bound."""
        if in_stream >= self.per_stream:
            self.rejected += 1
            raise FerryError(
                f"too many requests in flight on this stream: {in_stream} (limit {self.per_stream}, "
                "--grpc-max-stream-requests); read their answers before sending more",
                ErrorKind.RESOURCE_EXHAUSTED,
            )
        if not peer:
            return not_counted
        held = self.open.get(peer, 0)
        if held >= self.per_peer:
            self.rejected += 1
            raise FerryError(
                f"too many streamed requests in flight from {peer}: {held} (limit {self.per_peer}, "
                "--max-streamed-requests-per-peer); read their answers before sending more",
                ErrorKind.RESOURCE_EXHAUSTED,
            )
        self.open[peer] = held + 1
        left = False

        def leave() -> None:
            nonlocal left
            if left:
                return
            left = True
            count = self.open[peer] - 1
            if count:
                self.open[peer] = count
            else:
                del self.open[peer]

        return leave


def not_counted() -> None:
    """The release of a request not counted (this server's own intake processes, other models)."""


class StreamsCollector(Collector):
    """Exports the model process's open requests to decoupled models (``open_count``: all of them,
    whichever process took them in), the requests its bounds refused (an intake's refusals of
    its own clients are not among them), and its ``pacer``'s responses: let on, and waiting for
    their turn of the loop (``response_pacing.py``)."""

    def __init__(self, limits: StreamLimits, open_count: Callable[[], int], pacer: ResponsePacer) -> None:
        self._limits = limits
        self._open_count = open_count
        self._pacer = pacer

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ferry_streamed_requests", "Requests to decoupled models open (not yet final)", value=self._open_count()
        )
        yield CounterMetricFamily(
            "ferry_streamed_rejected",
            "Requests to decoupled models refused by the stream bounds in the model process (429/RESOURCE_EXHAUSTED)",
            value=self._limits.rejected,
        )
        yield CounterMetricFamily(
            "ferry_streamed_responses_paced",
            "Responses of decoupled models let on by the pacer (at most a bounded number per turn of the event loop)",
            value=self._pacer.granted,
        )
        yield GaugeMetricFamily(
            "ferry_streamed_responses_waiting",
            "Responses of decoupled models waiting for their turn of the event loop (other requests go first)",
            value=self._pacer.waiting,
        )
