"""Restart delays: capped exponential backoff with jitter, and crash-loop detection."""

from __future__ import annotations

from xce_agent.supervision.spec import RestartSpec

# Past this many doublings any delay is at its cap: the power never overflows a float.
_MAX_EXPONENT = 64


def restart_delay(spec: RestartSpec, rapid_exits: int, rand: float) -> float:
    """Delay before the restart that follows `rapid_exits` short-lived runs in a row.

    `rand` is a uniform number in [0, 1) from the caller, so this stays a pure function.
    """
    if rapid_exits <= 1:
        base = spec.initial_delay
    else:
        exponent = min(rapid_exits - 2, _MAX_EXPONENT)
        base = spec.delay * spec.multiplier**exponent
    base = min(base, spec.max_delay)
    spread = base * spec.jitter * (2.0 * rand - 1.0)
    return max(0.0, min(spec.max_delay, base + spread))


def recent_starts(starts: tuple[float, ...], now: float, window: float) -> tuple[float, ...]:
    """The start times that still fall inside the give-up window."""
    return tuple(t for t in starts if now - t < window)


def is_crash_loop(spec: RestartSpec, starts: tuple[float, ...], now: float) -> bool:
    return len(recent_starts(starts, now, spec.give_up_window)) >= spec.give_up_starts
