"""The response stream of a decoupled request gives the event loop a turn for every response it
hands on (a producer that keeps its buffer full otherwise held the loop for as long as it sent:
issue 38), and the bounds on streamed requests per stream and per client address count right."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ferry.api.stream_limits import StreamLimits
from ferry.errors import ErrorKind, FerryError
from ferry.response_streams import ResponseStream, StreamedResponse


def test_reading_a_full_stream_gives_the_loop_a_turn_for_every_response() -> None:
    async def main() -> list[int]:
        stream = ResponseStream(asyncio.get_running_loop(), capacity=32)
        for index in range(31):  # the buffer is full before the reader starts: it never has to wait
            assert stream.put(StreamedResponse({"OUT": np.array([index])}))
        assert stream.put(StreamedResponse({}, final=True))
        turns = 0

        async def other_client() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        seen = []
        async for _ in stream:
            seen.append(turns)
        other.cancel()
        return seen

    seen = asyncio.run(main())
    assert len(seen) == 32
    assert all(later > earlier for earlier, later in zip(seen, seen[1:], strict=False)), seen


def test_a_stream_has_at_most_its_cap_of_open_requests() -> None:
    limits = StreamLimits(per_stream=2, per_peer=10)
    limits.enter("10.0.0.1", 1)
    with pytest.raises(FerryError) as refused:
        limits.enter("10.0.0.1", 2)
    assert refused.value.kind is ErrorKind.RESOURCE_EXHAUSTED
    assert "(limit 2, --grpc-max-stream-requests)" in refused.value.message
    assert limits.rejected == 1


def test_an_address_has_at_most_its_cap_of_open_requests_until_one_ends() -> None:
    limits = StreamLimits(per_stream=100, per_peer=2)
    leave = limits.enter("10.0.0.1")
    limits.enter("10.0.0.1")
    with pytest.raises(FerryError) as refused:
        limits.enter("10.0.0.1")
    assert refused.value.kind is ErrorKind.RESOURCE_EXHAUSTED
    assert "from 10.0.0.1: 2 (limit 2, --max-streamed-requests-per-peer)" in refused.value.message
    limits.enter("10.0.0.2")  # another address has its own count
    leave()
    leave()  # uncounts once, however often called
    limits.enter("10.0.0.1")
    assert limits.open == {"10.0.0.1": 2, "10.0.0.2": 1}


def test_this_servers_own_intakes_are_not_counted() -> None:
    limits = StreamLimits(per_stream=100, per_peer=1)
    for _ in range(5):
        limits.enter("")
    assert limits.open == {}
