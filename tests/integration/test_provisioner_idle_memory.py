"""The provisioner does not grow when idle: passes that read the records and every machine's
power through the Redfish driver (a loopback BMC in its own process), on a fast clock.
`make provisioner-idle-soak` runs an hour of passes (bench/provisioner_idle.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("sushy")

from bench.provisioner_idle import measure


def test_idle_passes_do_not_grow_the_provisioner() -> None:
    figures = measure(passes=400, every=100)
    (first, base, _), *_, (last, end, _) = figures
    assert (first, last) == (100, 400), figures
    grew = end - base
    # 900 power reads after the warm-up: a leak of a kilobyte a read would show
    assert grew < 1024, f"RSS grew {grew} KiB over {last - first} idle passes: {figures}"
