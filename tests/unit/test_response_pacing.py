"""The pacer of streamed responses on a real event loop: how many it lets on per turn of the loop,
that other work scheduled meanwhile runs before the streams' backlog, and how its allowance follows
the length of the loop's turns (a clock the test moves, so nothing depends on this machine's speed)."""

from __future__ import annotations

import asyncio

from ferry.response_pacing import ResponsePacer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_at_most_the_allowance_goes_on_per_turn_and_other_work_goes_first() -> None:
    """200 streams' responses wait at once (one turn used to run them all); each turn lets at most
    the allowance on, and a callback another request schedules runs while most still wait."""
    pacer = ResponsePacer(target_s=1.0, most=8, clock=Clock())
    pacer.allowance = 8
    let_on: list[int] = []

    async def response(index: int) -> None:
        await pacer.turn()
        let_on.append(index)

    tasks = [asyncio.create_task(response(i)) for i in range(200)]
    await asyncio.sleep(0)  # every response is waiting now
    assert pacer.waiting == 200
    other: list[int] = []
    asyncio.get_running_loop().call_soon(lambda: other.append(len(let_on)))  # another request's next step
    seen = []
    while len(let_on) < 200:
        before = len(let_on)
        await asyncio.sleep(0)
        seen.append(len(let_on) - before)
    await asyncio.gather(*tasks)
    assert max(seen) <= 8 and sum(seen) == 200
    assert other and other[0] <= 8  # it ran with at most one turn's allowance ahead of it
    assert let_on == sorted(let_on)  # in arrival order: each stream gets its share
    assert pacer.granted == 200 and pacer.waiting == 0


async def test_the_allowance_halves_on_long_turns_and_grows_on_short_ones() -> None:
    clock = Clock()
    pacer = ResponsePacer(target_s=0.004, most=64, clock=clock)
    assert pacer.allowance == 64
    waiting = [asyncio.create_task(pacer.turn()) for _ in range(1000)]
    await asyncio.sleep(0)
    allowances = []
    for _ in range(10):  # long turns (other requests' work): down to one response per turn
        clock.now += 0.010
        await asyncio.sleep(0)
        allowances.append(pacer.allowance)
    assert allowances[:6] == [32, 16, 8, 4, 2, 1] and allowances[-1] == 1  # never none: streams move
    for _ in range(5):  # short turns: one more each turn
        await asyncio.sleep(0)
    assert pacer.allowance == 6
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


async def test_a_cancelled_response_gives_its_place_to_the_next() -> None:
    pacer = ResponsePacer(target_s=1.0, most=1, clock=Clock())
    pacer.allowance = 1
    first = asyncio.create_task(pacer.turn())
    second = asyncio.create_task(pacer.turn())
    await asyncio.sleep(0)
    first.cancel()
    await _turns(3)
    assert second.done() and not second.cancelled()
    assert pacer.granted == 1 and pacer.waiting == 0
