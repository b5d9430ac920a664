"""The wait between tries of a change overtaken by another replica: none at first, then a
doubling bound, capped, so a request gives up (503) within a few seconds at worst."""

from __future__ import annotations

from xce_controller.http import replicas


def test_the_first_tries_run_again_at_once_then_wait_a_doubling_capped_bound() -> None:
    bounds = [replicas.backoff(n) for n in range(replicas.RETRIES + 1)]
    assert bounds[: replicas.IMMEDIATE] == [0.0] * replicas.IMMEDIATE
    later = bounds[replicas.IMMEDIATE :]
    assert later[0] == replicas.BACKOFF_FIRST
    assert all(b <= replicas.BACKOFF_MAX for b in later)
    assert all(a <= b for a, b in zip(later, later[1:]))
    assert later[-1] == replicas.BACKOFF_MAX
    assert sum(bounds) < 5.0  # the longest a request waits in all before its 503
