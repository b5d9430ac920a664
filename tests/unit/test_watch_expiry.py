"""Held watches end spread out, and a burst of expiries leaves the loop to other work."""

from __future__ import annotations

import asyncio

from xce_controller import watch_expiry as we

BURST = 5000  # watches begun in the same second, as after a controller restart


def test_holds_are_a_random_share_of_what_was_asked() -> None:
    draws = iter([0.0, 1.0, 0.5])
    expiries = we.Expiries(rand=lambda: next(draws))
    assert [expiries.hold(30.0) for _ in range(3)] == [18.0, 30.0, 24.0]


def test_a_burst_of_expiries_lets_other_callbacks_run_between_slices() -> None:
    """Before: every watch of a burst was answered before the loop read anything else."""

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        expiries = we.Expiries(rand=lambda: 1.0)
        futures = [loop.create_future() for _ in range(BURST)]
        for fut in futures:
            expiries.add(fut, 0.05)
        seen: list[int] = []

        def probe() -> None:  # a heartbeat's read, ready when the burst began
            seen.append(sum(f.done() for f in futures))

        futures[0].add_done_callback(lambda _: loop.call_soon(probe))
        await asyncio.gather(*futures)
        return seen[0], expiries.released

    during, released = asyncio.run(main())
    assert released == BURST  # every watch ended
    assert during <= BURST // 10, during  # a slice or two, not the whole burst


def test_a_watch_done_before_its_hold_is_left_alone_and_close_ends_the_rest() -> None:
    async def main() -> tuple[bool, bool, int]:
        loop = asyncio.get_running_loop()
        expiries = we.Expiries()
        early, late = loop.create_future(), loop.create_future()
        expiries.add(early, 0.01)
        expiries.add(late, 60.0)
        early.set_result(None)  # its host changed
        await asyncio.sleep(0.05)
        expiries.close()
        return early.done(), late.done(), expiries.released

    assert asyncio.run(main()) == (True, True, 0)
