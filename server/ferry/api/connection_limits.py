"""Connection-level limits for the REST and metrics listeners, which uvicorn does not enforce itself.

uvicorn (with httptools) accepts every connection, waits forever for headers, keeps headers of any
size in memory and lets a body trickle in at one byte a second. A slow or hostile client could so
hold file descriptors, memory and admission slots without limit. This protocol class (uvicorn's own,
with a few hooks) refuses a connection past ``max_connections`` with a short 503 and closes it, gives
each request ``header_timeout`` seconds and ``max_header_bytes`` for its request line and headers
(408 / 431; the timeout measures the client, not the server: when it fires while bytes the client
sent wait unread in the kernel, because a burst or a stall kept this process from reading, the
client is timed again from then), and closes a request whose body arrives slower than ``min_body_rate`` bytes/s once
``body_grace`` seconds have passed (408), and
closes one whose client reads its response slower than that rate after the same grace (the unsent
answer is dropped, so a client that never reads cannot hold it). Idle keep-alive connections close
after uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import termios
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ferry_client.codec import dumps

log = logging.getLogger(__name__)

#: How often a request body's arrival rate is checked.
BODY_CHECK_INTERVAL_S = 1.0
#: How long an answered, refused connection is drained before it is closed, and how many may be
#: draining at once (past that they close at once, so a flood cannot hold descriptors this way).
LINGER_S = 1.0
MAX_LINGERING = 256
_lingering = 0


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


def guarded_protocol(limits: HttpConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``limits`` applied (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._refused = False
            self._closing = False
            self._in_headers = False
            self._header_bytes = 0
            self._header_timer: asyncio.TimerHandle | None = None
            self._header_since = 0.0  # when this request's line and headers began (loop time)
            self._body_open = False  # a body whose arrival rate is checked is still arriving
            self._body_timer: asyncio.TimerHandle | None = None
            self._body_bytes = 0
            self._body_clock = 0.0  # seconds the body has been receivable (reading not paused)
            self._send_timer: asyncio.TimerHandle | None = None
            self._send_clock = 0.0  # seconds writing has been paused (the client not reading)
            self._sent = 0  # bytes the client took meanwhile
            self._unsent = 0  # the transport's buffer at the last check

        # --- connections ---------------------------------------------------------------------

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            shared = limits.shared
            count = len(self.connections) if shared is None else shared.total()
            if limits.max_connections and count >= limits.max_connections:
                self._refused = True
                self.transport = transport
                message = f"too many open connections (limit {limits.max_connections}, --http-max-connections)"
                _answer_and_close(transport, raw_response(HTTPStatus.SERVICE_UNAVAILABLE, message, retry_after=1))
                return
            if shared is not None:
                shared.add(1)
            super().connection_made(transport)
            self._begin_headers()
            self._arm_header_timer()  # a client that sends nothing at all is timed too

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            if limits.shared is not None:
                limits.shared.add(-1)
            self._stop_timers()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused or self._closing:
                return  # answered and closing: what still arrives is read and dropped
            super().data_received(data)
            if self._in_headers and self.parser is not None:
                # the parser consumed all of ``data`` and the headers are still open: it was all header
                self._header_bytes += len(data)
                if limits.max_header_bytes and self._header_bytes > limits.max_header_bytes:
                    self._close(
                        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                        f"request line and headers exceed {limits.max_header_bytes} bytes (--http-max-header-bytes)",
                    )
                    return
            # Timers are armed only for what is still incomplete once this data is parsed: most
            # requests arrive whole in one read and need none (a timer per request is measurable CPU).
            if self._closing or self.transport.is_closing():
                return
            if self._in_headers:
                self._arm_header_timer()
            elif self._body_open and self._body_timer is None:
                self._body_timer = self.loop.call_later(BODY_CHECK_INTERVAL_S, self._check_body_rate)

        # --- per request ---------------------------------------------------------------------

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_headers:
                self._begin_headers()

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._cancel(self._header_timer)
            self._header_timer = None
            super().on_headers_complete()
            if self.parser.get_method() not in (b"GET", b"HEAD") and limits.min_body_rate:
                self._body_bytes = 0
                self._body_clock = 0.0
                self._body_open = True  # timed from the end of this read, if still arriving then

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._body_open = False
            self._cancel(self._body_timer)
            self._body_timer = None
            super().on_message_complete()

        def pause_writing(self) -> None:
            super().pause_writing()
            if limits.min_body_rate and self._send_timer is None:
                self._send_clock = 0.0
                self._sent = 0
                self._unsent = self.transport.get_write_buffer_size()
                self._send_timer = self.loop.call_later(BODY_CHECK_INTERVAL_S, self._check_send_rate)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._cancel(self._send_timer)
            self._send_timer = None

        # --- enforcement ---------------------------------------------------------------------

        def _check_send_rate(self) -> None:
            """Close a connection whose client reads the response slower than ``min_body_rate`` once
            ``body_grace`` has passed: its unread answer is memory held (and admission counts it)."""
            self._send_timer = None
            if self._closing or self.transport.is_closing():
                return
            unsent = self.transport.get_write_buffer_size()
            self._sent += max(0, self._unsent - unsent)
            self._unsent = unsent
            self._send_clock += BODY_CHECK_INTERVAL_S
            if self._sent < limits.min_body_rate * max(0.0, self._send_clock - limits.body_grace):
                log.info(
                    "closing connection from %s: the response was read slower than %d bytes/s "
                    "(--http-min-body-rate, --http-body-grace-secs); %d bytes unsent",
                    _peer(self.client),
                    limits.min_body_rate,
                    unsent,
                )
                self._closing = True
                self._stop_timers()
                self.transport.abort()  # drop the unsent bytes now; uvicorn's send sees the disconnect
                return
            self._send_timer = self.loop.call_later(BODY_CHECK_INTERVAL_S, self._check_send_rate)

        def _begin_headers(self) -> None:
            self._in_headers = True
            self._header_bytes = 0
            self._header_since = self.loop.time()

        def _arm_header_timer(self) -> None:
            """Time the request line and headers (from when they began), unless already timed."""
            if limits.header_timeout and self._header_timer is None:
                left = limits.header_timeout - (self.loop.time() - self._header_since)
                self._header_timer = self.loop.call_later(max(0.0, left), self._header_timed_out)

        def _header_timed_out(self) -> None:
            self._header_timer = None
            if not self._in_headers or self._closing or self.transport.is_closing():
                return
            if _unread_bytes(self.transport) > 0:
                # the client sent more than this process has read: the server is behind (a burst,
                # a stalled loop), not the client; time the client again from now
                self._header_timer = self.loop.call_later(limits.header_timeout, self._header_timed_out)
                return
            self._close(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request headers not received within {limits.header_timeout:g} s (--http-header-timeout-secs)",
            )

        def _check_body_rate(self) -> None:
            """Close the request if its body fell behind ``min_body_rate`` after the grace period.

            Time while uvicorn has paused reading (the app has not consumed what arrived) does not
            count against the client."""
            self._body_timer = None
            if self._closing or self.transport.is_closing() or self.cycle is None or not self.cycle.more_body:
                return
            if not self.flow.read_paused:
                self._body_clock += BODY_CHECK_INTERVAL_S
            expected = limits.min_body_rate * max(0.0, self._body_clock - limits.body_grace)
            if self._body_bytes < expected:
                self._close(
                    HTTPStatus.REQUEST_TIMEOUT,
                    f"request body arrived slower than {limits.min_body_rate} bytes/s "
                    "(--http-min-body-rate, --http-body-grace-secs)",
                )
                return
            self._body_timer = self.loop.call_later(BODY_CHECK_INTERVAL_S, self._check_body_rate)

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
            _answer_and_close(self.transport, raw_response(status, message))

        def _stop_timers(self) -> None:
            self._cancel(self._header_timer)
            self._cancel(self._body_timer)
            self._cancel(self._send_timer)
            self._header_timer = self._body_timer = self._send_timer = None

        @staticmethod
        def _cancel(timer: asyncio.TimerHandle | None) -> None:
            if timer is not None:
                timer.cancel()

    return GuardedHttpToolsProtocol


def _answer_and_close(transport: asyncio.Transport, response: bytes) -> None:
    """Send ``response`` and close without a reset: closing a socket with unread input makes the
    kernel send RST, which can destroy the answer before the client reads it. So finish our side
    (FIN), keep reading and dropping input for a moment, then close."""
    transport.write(response)
    if not transport.can_write_eof():  # TLS: no half-close
        transport.close()
        return
    global _lingering
    if _lingering >= MAX_LINGERING:  # under a flood, descriptors matter more than a clean goodbye
        transport.close()
        return
    transport.write_eof()
    _lingering += 1

    def close() -> None:
        global _lingering
        _lingering -= 1
        transport.close()

    asyncio.get_running_loop().call_later(LINGER_S, close)


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
