"""The controller's policy for Python's cyclic garbage collector: short passes, never a full one.

With thousands of watches and connections held open, the full pass scanned millions of objects
and stopped the event loop for 0.5-3 s. So `serve` collects the young generations and freezes
their survivors (out of every later pass), and never runs the full pass on its own: records
and finished requests are freed by reference counting, and the full pass found no cyclic
garbage to free in the load benchmark.

How often matters. A watch that ends frees its objects and the next one allocates as many, so
the young generation's count (allocations minus frees) stays under its threshold and the
collector's own passes hardly run: everything a second of renewed watches allocated waits for
the next freeze. Once a second, with 10,000 hosts, that was 30,000-60,000 objects and a pass
of 20-70 ms, a stall every request due then waited out. The period therefore follows the cost
of the last pass: shorter while passes cost more than PAUSE_BUDGET, longer (up to once a
second, as idle) while they cost less.
"""

from __future__ import annotations

import gc
import time

PAUSE_BUDGET = 0.003  # seconds of CPU one pass may take
MIN_PERIOD = 0.05  # at most 20 passes a second, however busy
MAX_PERIOD = 1.0  # and at least one, however idle


def next_period(period: float, pause: float) -> float:
    """The next period from the last one and what its pass cost. A pass costs about in
    proportion to its period (survivors accumulate at the allocation rate), so the period
    aims at the budget: it shortens at once when load arrives, and lengthens at most twofold
    a pass as load goes (a pass that happens to find little does not swing it)."""
    wanted = period * PAUSE_BUDGET / pause if pause > 0 else MAX_PERIOD
    return min(MAX_PERIOD, max(MIN_PERIOD, min(wanted, period * 2)))


def freeze_young() -> float:
    """Collect the young generations, freeze the survivors, keep the full pass out of reach;
    returns the CPU time the pass took (the thread's, so other processes do not count)."""
    began = time.thread_time()
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], 1 << 30)
    return time.thread_time() - began
