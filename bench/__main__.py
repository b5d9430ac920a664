"""`python -m bench [section ...]`: run the benchmarks and print their tables.

`--quick` runs each section at a tiny size (`make test` runs every section so, so a bench
cannot rot unseen); `--readme README.md` rewrites the README's tables from this run. A section
whose needs are missing here prints `SECTION: skipped (REASON)` and the run goes on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import Skipped, readme

SECTIONS = [
    "supervision",
    "flood",
    "decommission",
    "notices",
    "controller",
    "simulator",
    "leases",
    "ha",
]
# `make bench` (no section named): all but ha, whose 5,000- and 10,000-host replicas on
# PostgreSQL take most of an hour on two cores (`make bench-ha`).
DEFAULT = [s for s in SECTIONS if s != "ha"]
OTHERS = ["never-two", "provisioner-idle", "ha-soak"]  # by name only (root, or long)
ROOT = Path(__file__).resolve().parent.parent


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("sections", nargs="*", default=DEFAULT)
    parser.add_argument("--schedules", type=int, default=0, help="leases, never-two: schedules")
    parser.add_argument(
        "--seed", type=int, default=None, help="leases, never-two: the schedules' seed"
    )
    parser.add_argument("--first", type=int, default=0, help="never-two: the first schedule")
    parser.add_argument("--lanes", type=int, default=4, help="never-two: hosts at once")
    parser.add_argument("--passes", type=int, default=0, help="provisioner-idle: passes")
    parser.add_argument(
        "--hosts", default="", help="ha: the fleet sizes, comma-separated (5000,10000)"
    )
    parser.add_argument("--seconds", type=float, default=0, help="ha: seconds per phase")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: it runs, no figures")
    parser.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="after the run, replace each section's table in this file (between "
        "<!-- bench:SECTION --> and <!-- /bench:SECTION -->) with what the run printed",
    )
    args = parser.parse_args()
    for section in args.sections:
        if section not in SECTIONS + OTHERS:
            parser.error(f"unknown section {section!r}")
    if args.readme is not None and args.quick:
        parser.error("--readme takes a full run's figures, not --quick's")
    return args


def run(section: str, args: argparse.Namespace) -> str:
    quick = args.quick
    if section == "supervision":
        from bench import supervision

        if quick:
            return supervision.run(restarts=3, stops=2, idle_seconds=1)
        return supervision.run()
    if section == "flood":
        from bench import flood

        return flood.run(restarts=5 if quick else 300)
    if section == "decommission":
        from bench import decommission

        return decommission.run(runs=2 if quick else 50)
    if section == "notices":
        from bench import notices

        if quick:
            notices.WARMUP_POLLS = 0.0
            return notices.run(runs=1, loss=1)
        return notices.run()
    if section == "controller":
        from bench import controller_load

        if quick:
            controller_load.PHASED_SECONDS = 2.0
            controller_load.IDLE_SECONDS = controller_load.SETTLE_SECONDS = 1.0
            return controller_load.run(hosts=100, seconds=2)
        return controller_load.run()
    if section == "simulator":
        from bench import simulator

        return simulator.run(quick)
    if section == "leases":
        from bench import leases

        count = args.schedules or (2 if quick else 100)  # 500 and more: make lease-soak
        return leases.run(schedules=count, seed=args.seed, handovers=1 if quick else 5)
    if section == "ha":
        from bench import ha

        sizes = tuple(int(n) for n in args.hosts.split(",") if n) or (
            (50,) if quick else (5000, 10000)
        )
        seconds = args.seconds or (2.0 if quick else 30.0)
        phased = args.seconds or (2.0 if quick else 45.0)
        appends = 1.0 if quick else 10.0
        return ha.run(sizes=sizes, seconds=seconds, phased=phased, appends=appends)
    if section == "never-two":
        from bench import never_two

        count = args.schedules or (2 if quick else 1000)
        return never_two.run(count, args.seed, args.first, args.lanes)
    if section == "provisioner-idle":
        from bench import provisioner_idle

        return provisioner_idle.run(passes=args.passes or (200 if quick else 3600))
    from bench import ha_soak

    if quick:
        return ha_soak.run(rounds=1, hosts=50, settle=5.0)
    return ha_soak.run(rounds=args.schedules or 3)


def main() -> None:
    args = parse()
    target = args.readme
    if target is not None:
        readme.check(target.read_text(), args.sections)  # before minutes of benchmarks
        named = readme.this_run(ROOT)
    blocks: dict[str, str] = {}
    for section in args.sections:
        load, began = readme.load(), time.monotonic()
        try:
            out = run(section, args)
        except Skipped as e:
            print(f"{section}: skipped ({e})")
            if target is not None:
                print(f"bench: {target}: {section}'s table kept as it was", file=sys.stderr)
        else:
            print(out)
            if target is not None:
                blocks[section] = named.header(load, readme.load()) + "\n" + out
        print(f"({section}: {time.monotonic() - began:.0f} s wall time)")
        print(flush=True)
    if target is not None:
        target.write_text(readme.replace(target.read_text(), blocks))
        done = ", ".join(blocks) or "none"
        print(f"bench: {target}: the tables replaced: {done}", file=sys.stderr)


if __name__ == "__main__":
    main()
