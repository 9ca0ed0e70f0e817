"""Connection-level limits for the REST and metrics listeners, which uvicorn does not enforce itself.

uvicorn (with httptools) accepts every connection, waits forever for headers, keeps headers of any
size in memory and lets a body trickle in at one byte a second. A slow or hostile client could so
hold file descriptors, memory and admission slots without limit. ``GuardedHttpToolsProtocol``
(uvicorn's own protocol, with a few hooks) refuses a connection past ``max_connections`` with a short
503 and closes it, gives each request ``header_timeout`` seconds and ``max_header_bytes`` for its
request line and headers (408 / 431; the timeout measures the client, not the server: when it fires
while bytes the client sent wait unread in the kernel, because a burst or a stall kept this process
from reading, the client is timed again from then), and closes a request whose body arrives slower
than ``min_body_rate`` bytes/s once ``body_grace`` seconds have passed (408), and closes one whose
client reads its response slower than that rate after the same grace (the unsent answer is dropped,
so a client that never reads cannot hold it). Idle keep-alive connections close after uvicorn's
``timeout_keep_alive``.

Why hooks and not uvicorn's settings: uvicorn 0.x has none of these for httptools. Its
``limit_concurrency`` answers 503 only once a request's headers are complete (a connection that
never sends them is not refused), counts one process (not the intake processes sharing a port) and
names no flag; ``h11_max_incomplete_event_size`` applies to the h11 parser only (pure Python, several
times httptools' CPU per request, and it answers 400, not 431); the only timeout is the keep-alive
one. The hooks use uvicorn's parser callbacks and, where the server must act on a request, its
``cycle`` (to make the app see a disconnect) and ``flow`` (to not time the client while uvicorn
paused reading).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import termios
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferry_client.codec import dumps

from .http_body_reads import RECEIVE_INTO, BufferedReads, DirectBodyProtocol

log = logging.getLogger(__name__)

#: How often a request body's arrival rate (and a response's departure rate) is checked.
RATE_CHECK_INTERVAL_S = 1.0
#: How long an answered, refused connection is drained before it is closed, and how many may be
#: draining at once per listener (past that they close at once, so a flood cannot hold descriptors).
LINGER_S = 1.0
MAX_LINGERING = 256


class OpenConnections(Protocol):
    """A connection count shared by several processes serving one port (``intake/shared_state.py``)."""

    def add(self, delta: int) -> None: ...

    def total(self) -> int: ...


@dataclass(frozen=True)
class HttpConnectionLimits:
    """The options (see settings.py); 0 turns a limit off. ``shared``: the cap counts the
    connections of every intake process on the port, not only this one's."""

    max_connections: int = 1000
    header_timeout: float = 10.0
    max_header_bytes: int = 64 * 1024
    min_body_rate: int = 1024
    body_grace: float = 10.0
    shared: OpenConnections | None = None


def raw_response(status: HTTPStatus, message: str, retry_after: int | None = None) -> bytes:
    """A complete HTTP/1.1 error response that closes the connection, written without the app."""
    body = dumps({"error": message})
    head = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class ConnectionGuard:
    """One listener's limits and what its connections share: how many answered connections are
    still draining (``answer_and_close``), bounded per listener."""

    def __init__(self, limits: HttpConnectionLimits) -> None:
        self.limits = limits
        self.lingering = 0

    def protocol(self) -> type[BufferedReads]:
        """The class to pass as ``uvicorn.Config(http=...)``: uvicorn builds each connection's
        protocol from a class itself, so this guard rides on a subclass made for it (behind the
        transport's ``BufferedReads``, see ``http_body_reads``)."""
        guarded = type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"guard": self})
        return type("GuardedReads", (BufferedReads,), {"http_class": guarded})

    def answer_and_close(self, transport: asyncio.Transport, response: bytes) -> None:
        """Send ``response`` and close without a reset: closing a socket with unread input makes the
        kernel send RST, which can destroy the answer before the client reads it. So finish our side
        (FIN), keep reading and dropping input for a moment, then close."""
        transport.write(response)
        if not transport.can_write_eof() or self.lingering >= MAX_LINGERING:
            # TLS has no half-close; under a flood, descriptors matter more than a clean goodbye
            transport.close()
            return
        transport.write_eof()
        self.lingering += 1

        def close() -> None:
            self.lingering -= 1
            transport.close()

        asyncio.get_running_loop().call_later(LINGER_S, close)


@dataclass
class _Progress:
    """Bytes a client moved (sent us, or took from us) over the seconds it was timed."""

    moved: int = 0
    seconds: float = 0.0

    def behind(self, limits: HttpConnectionLimits) -> bool:
        """Slower than ``min_body_rate`` once ``body_grace`` has passed."""
        return self.moved < limits.min_body_rate * max(0.0, self.seconds - limits.body_grace)


class GuardedHttpToolsProtocol(DirectBodyProtocol):
    """uvicorn's httptools protocol with its listener's ``guard`` applied (see the module's doc),
    reading large bodies straight into their buffers (``http_body_reads``)."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = self.guard.limits
        self._refused = False
        self._closing = False
        self._in_headers = False
        self._header_bytes = 0
        self._header_since = 0.0  # when this request's line and headers began (loop time)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_open = False  # a body whose arrival rate is checked is still arriving
        self._body = _Progress()  # seconds counted only while reading is not paused
        self._body_timer: asyncio.TimerHandle | None = None
        self._sent = _Progress()  # while writing is paused (the client not reading)
        self._unsent = 0  # the transport's buffer at the last check
        self._send_timer: asyncio.TimerHandle | None = None

    # --- connections -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limits = self._limits
        count = len(self.connections) if limits.shared is None else limits.shared.total()
        if limits.max_connections and count >= limits.max_connections:
            self._refused = True
            self.transport = transport
            message = f"too many open connections (limit {limits.max_connections}, --http-max-connections)"
            self.guard.answer_and_close(transport, raw_response(HTTPStatus.SERVICE_UNAVAILABLE, message, retry_after=1))
            return
        if limits.shared is not None:
            limits.shared.add(1)
        super().connection_made(transport)
        self._begin_headers()
        self._arm_header_timer()  # a client that sends nothing at all is timed too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self._limits.shared is not None:
            self._limits.shared.add(-1)
        self._stop_timers()
        if self.scope is not None:  # its ``receive_into`` refers to this protocol: no cycle left
            self.scope.pop(RECEIVE_INTO, None)  # type: ignore[misc]
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self._closing:
            return  # answered and closing: what still arrives is read and dropped
        super().data_received(data)
        if self._in_headers and self.parser is not None:
            # the parser consumed all of ``data`` and the headers are still open: it was all header
            self._header_bytes += len(data)
            if self._limits.max_header_bytes and self._header_bytes > self._limits.max_header_bytes:
                self._close(
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                    f"request line and headers exceed {self._limits.max_header_bytes} bytes (--http-max-header-bytes)",
                )
                return
        # Timers are armed only for what is still incomplete once this data is parsed: most
        # requests arrive whole in one read and need none (a timer per request is measurable CPU).
        if self._closing or self.transport.is_closing():
            return
        if self._in_headers:
            self._arm_header_timer()
        elif self._body_open and self._body_timer is None:
            self._body_timer = self.loop.call_later(RATE_CHECK_INTERVAL_S, self._check_body_rate)

    # --- per request (httptools' parser callbacks) ---------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_headers:
            self._begin_headers()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._cancel(self._header_timer)
        self._header_timer = None
        super().on_headers_complete()
        if self.parser.get_method() not in (b"GET", b"HEAD") and self._limits.min_body_rate:
            self._body = _Progress()
            self._body_open = True  # timed from the end of this read, if still arriving then

    def on_body(self, body: bytes) -> None:
        self._body.moved += len(body)
        super().on_body(body)

    def body_progress(self, nbytes: int) -> None:
        """Bytes read straight into a body's buffer: progress as ``on_body``'s, timed the same way."""
        self._body.moved += nbytes
        if self._body_open and self._body_timer is None and not self._closing:
            self._body_timer = self.loop.call_later(RATE_CHECK_INTERVAL_S, self._check_body_rate)

    def on_message_complete(self) -> None:
        self._body_open = False
        self._cancel(self._body_timer)
        self._body_timer = None
        super().on_message_complete()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._limits.min_body_rate and self._send_timer is None:
            self._sent = _Progress()
            self._unsent = self.transport.get_write_buffer_size()
            self._send_timer = self.loop.call_later(RATE_CHECK_INTERVAL_S, self._check_send_rate)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel(self._send_timer)
        self._send_timer = None

    # --- enforcement -------------------------------------------------------------------------

    def _check_send_rate(self) -> None:
        """Close a connection whose client reads the response slower than ``min_body_rate`` once
        ``body_grace`` has passed: its unread answer is memory held (and admission counts it)."""
        self._send_timer = None
        if self._closing or self.transport.is_closing():
            return
        unsent = self.transport.get_write_buffer_size()
        self._sent.moved += max(0, self._unsent - unsent)
        self._unsent = unsent
        self._sent.seconds += RATE_CHECK_INTERVAL_S
        if self._sent.behind(self._limits):
            log.info(
                "closing connection from %s: the response was read slower than %d bytes/s "
                "(--http-min-body-rate, --http-body-grace-secs); %d bytes unsent",
                _peer(self.client),
                self._limits.min_body_rate,
                unsent,
            )
            self._closing = True
            self._stop_timers()
            self.transport.abort()  # drop the unsent bytes now; uvicorn's send sees the disconnect
            return
        self._send_timer = self.loop.call_later(RATE_CHECK_INTERVAL_S, self._check_send_rate)

    def _begin_headers(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        self._header_since = self.loop.time()

    def _arm_header_timer(self) -> None:
        """Time the request line and headers (from when they began), unless already timed."""
        if self._limits.header_timeout and self._header_timer is None:
            left = self._limits.header_timeout - (self.loop.time() - self._header_since)
            self._header_timer = self.loop.call_later(max(0.0, left), self._header_timed_out)

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if not self._in_headers or self._closing or self.transport.is_closing():
            return
        timeout = self._limits.header_timeout
        if _unread_bytes(self.transport) > 0:
            # the client sent more than this process has read: the server is behind (a burst,
            # a stalled loop), not the client; time the client again from now
            self._header_timer = self.loop.call_later(timeout, self._header_timed_out)
            return
        self._close(
            HTTPStatus.REQUEST_TIMEOUT,
            f"request headers not received within {timeout:g} s (--http-header-timeout-secs)",
        )

    def _check_body_rate(self) -> None:
        """Close the request if its body fell behind ``min_body_rate`` after the grace period.

        Time while uvicorn has paused reading (the app has not consumed what arrived) does not
        count against the client."""
        self._body_timer = None
        if self._closing or self.transport.is_closing() or not self._body_open:
            return
        if not self.flow.read_paused:
            self._body.seconds += RATE_CHECK_INTERVAL_S
        if self._body.behind(self._limits):
            self._close(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request body arrived slower than {self._limits.min_body_rate} bytes/s "
                "(--http-min-body-rate, --http-body-grace-secs)",
            )
            return
        self._body_timer = self.loop.call_later(RATE_CHECK_INTERVAL_S, self._check_body_rate)

    def _close(self, status: HTTPStatus, message: str) -> None:
        """Answer ``status`` if no response has started, then close the connection."""
        log.info("closing connection from %s: %s", _peer(self.client), message)
        self._closing = True
        self._stop_timers()
        if self.cycle is not None:  # the app sees a disconnect and writes nothing more
            started = self.cycle.response_started
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            if started:
                self.transport.close()
                return
        self.guard.answer_and_close(self.transport, raw_response(status, message))

    def _stop_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer, self._send_timer):
            self._cancel(timer)
        self._header_timer = self._body_timer = self._send_timer = None

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()


def _unread_bytes(transport: asyncio.Transport) -> int:
    """Bytes the kernel holds for this connection that this process has not read yet (0 if unknown)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(raw, "little", signed=True)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown peer"


class ConnectionCollector(Collector):
    """``ferry_http_open_connections``: open connections of each uvicorn listener (refused ones excluded)."""

    def __init__(self, listeners: dict[str, Callable[[], int]]) -> None:
        self._listeners = listeners

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "ferry_http_open_connections", "Open connections of a REST-style listener", labels=["listener"]
        )
        for name, count in self._listeners.items():
            family.add_metric([name], count())
        yield family
