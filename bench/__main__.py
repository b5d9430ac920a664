"""`python -m bench [section ...]`: run the benchmarks and print their tables."""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument(
        "sections",
        nargs="*",
        default=[
            "supervision",
            "flood",
            "decommission",
            "notices",
            "controller",
            "simulator",
            "leases",
            "ha",
        ],
    )
    parser.add_argument("--schedules", type=int, default=0, help="leases, never-two: schedules")
    parser.add_argument("--seed", type=int, default=None, help="never-two: the schedules' seed")
    parser.add_argument("--first", type=int, default=0, help="never-two: the first schedule")
    parser.add_argument("--lanes", type=int, default=4, help="never-two: hosts at once")
    parser.add_argument("--passes", type=int, default=0, help="provisioner-idle: passes")
    parser.add_argument(
        "--hosts", default="", help="ha: the fleet sizes, comma-separated (5000,10000)"
    )
    parser.add_argument("--seconds", type=float, default=0, help="ha: seconds per phase")
    parser.add_argument("--quick", action="store_true", help="fewer iterations, shorter idle")
    args = parser.parse_args()
    for section in args.sections:
        if section == "supervision":
            from bench import supervision

            if args.quick:
                print(supervision.run(restarts=3, stops=3, idle_seconds=2))
            else:
                print(supervision.run())
        elif section == "flood":
            from bench import flood

            print(flood.run(restarts=20 if args.quick else 300))
        elif section == "decommission":
            from bench import decommission

            print(decommission.run(runs=3 if args.quick else 50))
        elif section == "notices":
            from bench import notices

            print(notices.run(runs=3 if args.quick else 20))
        elif section == "controller":
            from bench import controller_load

            if args.quick:
                controller_load.PHASED_SECONDS = 3.0
                print(controller_load.run(hosts=200, seconds=3))
            else:
                print(controller_load.run())
        elif section == "simulator":
            from bench import simulator

            print(simulator.run(simulator.QUICK) if args.quick else simulator.run())
        elif section == "leases":
            from bench import leases

            count = args.schedules or (3 if args.quick else 500)
            print(leases.run(schedules=count, handovers=1 if args.quick else 5))
        elif section == "ha":
            from bench import ha

            sizes = tuple(int(n) for n in args.hosts.split(",") if n) or (
                (200, 400) if args.quick else (5000, 10000)
            )
            seconds = args.seconds or (5.0 if args.quick else 30.0)
            phased = args.seconds or (5.0 if args.quick else 45.0)
            appends = 3.0 if args.quick else 10.0
            print(ha.run(sizes=sizes, seconds=seconds, phased=phased, appends=appends))
        elif section == "never-two":
            from bench import never_two

            count = args.schedules or (2 if args.quick else 1000)
            print(never_two.run(count, args.seed, args.first, args.lanes))
        elif section == "provisioner-idle":
            from bench import provisioner_idle

            print(provisioner_idle.run(passes=args.passes or (600 if args.quick else 3600)))
        elif section == "ha-soak":
            from bench import ha_soak

            if args.quick:
                print(ha_soak.run(rounds=1, hosts=50, settle=5.0))
            else:
                print(ha_soak.run(rounds=args.schedules or 3))
        else:
            parser.error(f"unknown section {section!r}")
        print()


main()
