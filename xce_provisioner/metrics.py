"""The provisioner's metrics, written as a Prometheus textfile (node_exporter's collector).

Counters live in memory and restart at zero with the process (Prometheus' `rate` copes);
the file is written to a temporary name in the same directory and renamed over the target,
so a scrape never reads half a file.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from xce_provisioner.drivers.base import Power


class Metrics:
    def __init__(self) -> None:
        self.steps: Counter[tuple[str, str, str]] = Counter()  # action, phase, code
        self.bmc_errors: Counter[tuple[str, str]] = Counter()  # bmc, code
        self.controller_errors = 0
        self.power: dict[str, Power] = {}  # machine -> last reading

    def render(self) -> str:
        lines = [
            "# HELP xce_provisioner_power_steps_total Power steps, by action, phase, code.",
            "# TYPE xce_provisioner_power_steps_total counter",
        ]
        for (action, phase, code), n in sorted(self.steps.items()):
            lines.append(
                f'xce_provisioner_power_steps_total{{action="{action}",phase="{phase}",'
                f'code="{code}"}} {n}'
            )
        lines += [
            "# HELP xce_provisioner_bmc_errors_total Failed BMC reads and requests, by code.",
            "# TYPE xce_provisioner_bmc_errors_total counter",
        ]
        for (bmc, code), n in sorted(self.bmc_errors.items()):
            lines.append(f'xce_provisioner_bmc_errors_total{{bmc="{bmc}",code="{code}"}} {n}')
        lines += [
            "# HELP xce_provisioner_controller_errors_total Failed calls to the controller.",
            "# TYPE xce_provisioner_controller_errors_total counter",
            f"xce_provisioner_controller_errors_total {self.controller_errors}",
            "# HELP xce_provisioner_machines Machines by last power reading.",
            "# TYPE xce_provisioner_machines gauge",
        ]
        by_state = Counter(self.power.values())
        for state in Power:
            lines.append(f'xce_provisioner_machines{{power="{state.value}"}} {by_state[state]}')
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        temp = path.with_name(f".{path.name}.tmp")
        with open(temp, "w") as f:
            f.write(self.render())
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
