"""PeerTurns: a peer's request messages are received a few at a time, the rest wait in order."""

from __future__ import annotations

import asyncio

import pytest

from ferry.api.grpc_turns import PeerTurns, ReceiveBudget
from ferry.front_doors import grpc_limits, receive_turns
from ferry.settings import Settings


async def test_turns_are_per_peer_and_handed_over_in_arrival_order() -> None:
    turns = PeerTurns(1)
    assert turns.enter_now("a")
    assert turns.enter_now("b")  # another peer has turns of its own
    assert not turns.enter_now("a")
    order: list[int] = []

    async def wait(index: int) -> None:
        await turns.wait("a")
        order.append(index)

    waiters = [asyncio.create_task(wait(index)) for index in range(3)]
    await asyncio.sleep(0)
    assert order == []
    for expected in range(3):
        turns.leave("a")  # the holder's message arrived: the oldest waiter gets the turn
        await asyncio.sleep(0)
        assert order == list(range(expected + 1))
    await asyncio.gather(*waiters)
    turns.leave("a")
    turns.leave("b")
    assert turns._receiving == {} and turns._waiting == {}


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    turns = PeerTurns(1)
    assert turns.enter_now("a")
    gone = asyncio.create_task(turns.wait("a"))
    stays = asyncio.create_task(turns.wait("a"))
    await asyncio.sleep(0)
    gone.cancel()  # e.g. its request deadline passed, or its client hung up
    with pytest.raises(asyncio.CancelledError):
        await gone
    turns.leave("a")
    await asyncio.wait_for(stays, 1)
    turns.leave("a")
    assert turns._receiving == {} and turns._waiting == {}


async def test_a_turn_handed_to_a_call_cancelled_at_that_moment_is_passed_on() -> None:
    turns = PeerTurns(1)
    assert turns.enter_now("a")
    first = asyncio.create_task(turns.wait("a"))
    second = asyncio.create_task(turns.wait("a"))
    await asyncio.sleep(0)
    turns.leave("a")  # hands the turn to ``first``...
    first.cancel()  # ...which is cancelled before it runs: the turn must go on, not be lost
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    turns.leave("a")
    assert turns._receiving == {} and turns._waiting == {}


async def test_all_peers_together_hold_at_most_total_turns_handed_over_peer_after_peer() -> None:
    """Issue 38 item 7: per-address turns were multiplied by addresses; now all of them together
    hold at most ``total``, and a freed turn goes to the peer waiting longest that may take one."""
    turns = PeerTurns(2, total=3)
    assert turns.enter_now("a") and turns.enter_now("a")
    assert turns.enter_now("b")
    assert not turns.enter_now("c")  # under its own limit, but every turn of all peers is held
    served: list[str] = []

    async def wait(peer: str) -> None:
        await turns.wait(peer)
        served.append(peer)

    waiters = [asyncio.create_task(wait(peer)) for peer in ("c", "a", "c", "d")]
    await asyncio.sleep(0)
    turns.leave("b")  # c waited first
    await asyncio.sleep(0)
    assert served == ["c"] and turns.held == 3
    turns.leave("a")  # c went to the back once served: a, under its limit again, is next
    await asyncio.sleep(0)
    assert served == ["c", "a"]
    turns.leave("c")  # peers in turn: d, which has not been served yet, before c's second call
    await asyncio.sleep(0)
    assert served == ["c", "a", "d"]
    for peer in ("a", "a", "d"):
        turns.leave(peer)
        await asyncio.sleep(0)
    assert served == ["c", "a", "d", "c"]
    await asyncio.gather(*waiters)
    turns.leave("c")
    assert turns.held == 0 and turns._receiving == {} and turns._waiting == {}


@pytest.mark.parametrize(("processes", "turns", "calls"), [(1, 2, 2048), (2, 1, 1024), (3, 1, 683), (4, 1, 512)])
def test_intake_processes_share_a_peers_turns_and_the_call_cap(processes: int, turns: int, calls: int) -> None:
    """Each intake process keeps its own turns, and a client's connections spread over them: the
    peer's turns (2, unary and streamed) are split among the processes, at least one each, like
    the call cap."""
    settings = Settings(
        grpc_reads_per_peer=2,
        grpc_stream_reads_per_peer=2,
        grpc_max_concurrent_rpcs=2048,
        grpc_receive_bytes=16 * 48 * 2**20,  # turns enough that the budget does not cap a peer's
    )
    limits = grpc_limits(settings, processes)
    assert (limits.reads_per_peer, limits.stream_reads_per_peer, limits.max_concurrent_rpcs) == (turns, turns, calls)
    # all addresses together: the receive budget is split too, and a peer's turns never exceed it (item 7)
    assert limits.reads_total == receive_turns(settings, processes) >= 1
    assert limits.stream_reads_total == max(1, limits.reads_total - 1)
    assert limits.reads_per_peer <= limits.reads_total and limits.stream_reads_per_peer <= limits.stream_reads_total
    # one address holds at most half a process's share of the calls (issue 38 item 8)
    assert limits.max_calls_per_peer == min(settings.grpc_max_calls_per_peer, calls // 2)


@pytest.mark.parametrize(
    ("receive", "message", "processes", "turns"),
    [
        (96, 48, 1, 2),
        (96, 48, 2, 2),
        (96, 16, 1, 6),
        (96, 16, 2, 3),
        (96, 16, 4, 2),
        (96, 100, 1, 2),
        (1024, 1, 4, 256),
    ],
)
def test_the_receive_budget_over_the_largest_message_is_every_turn(
    receive: int, message: int, processes: int, turns: int
) -> None:
    """Each posted read may receive up to --grpc-max-message-bytes: a process may post as many as
    its share of --grpc-receive-bytes holds, unary and streamed together, and at least two (four
    intakes share the defaults as one 16 MiB turn each, and an idle stream held that one turn while
    every unary call waited); a smaller message limit gives more turns for the same memory."""
    settings = Settings(grpc_receive_bytes=receive * 2**20, grpc_max_message_bytes=message * 2**20)
    limits = grpc_limits(settings, processes)
    assert limits.reads_total == turns
    assert limits.stream_reads_total == turns - 1  # the last turn is never a stream's


def test_without_stream_turns_one_turn_is_enough() -> None:
    """Streams that take no turns (--grpc-stream-reads-per-peer 0) leave the one turn to unary calls."""
    settings = Settings(grpc_receive_bytes=96 * 2**20, grpc_max_message_bytes=100 * 2**20, grpc_stream_reads_per_peer=0)
    assert grpc_limits(settings, 1).reads_total == 1


async def test_unary_and_stream_turns_share_one_budget_and_unary_calls_come_first() -> None:
    """More calls and streams than the budget allows: no more turns held than it has, streams at
    most all but one (a unary call never waits behind idle streams), and the waiting are served as
    turns come free, unary calls first."""
    budget = ReceiveBudget(3)
    unary, streams = PeerTurns(2, 3, budget), PeerTurns(8, 2, budget)
    assert streams.enter_now("a") and streams.enter_now("b")
    assert not streams.enter_now("c")  # streams hold all but one turn
    assert unary.enter_now("c")  # the last one is a unary call's
    assert budget.held == 3 and not unary.enter_now("d")  # every turn of the budget is held
    served: list[str] = []

    async def wait(turns: PeerTurns, name: str) -> None:
        await turns.wait(name)
        served.append(name)

    waiters = [asyncio.create_task(wait(streams, "s")), asyncio.create_task(wait(unary, "u"))]
    await asyncio.sleep(0)
    assert served == [] and budget.held == 3
    streams.leave("a")  # a stream's turn comes free: the waiting unary call takes it
    await asyncio.sleep(0)
    assert served == ["u"] and budget.held == 3 and (unary.held, streams.held) == (2, 1)
    unary.leave("c")
    await asyncio.sleep(0)
    assert served == ["u", "s"] and (unary.held, streams.held) == (1, 2)
    await asyncio.gather(*waiters)
    for turns, peer in ((unary, "u"), (streams, "s"), (streams, "b")):
        turns.leave(peer)
    assert budget.held == 0
