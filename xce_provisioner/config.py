"""The provisioner's config file: read, checked whole, frozen.

```yaml
controller: {url: https://ctl:8080, token_file: /etc/xce/prov-token, ca_file: ...}
                         # url: one URL, or a list of the controller's replicas
interval: 1s             # how often it reads the records and the machines' power
graceful_timeout: 60s    # a graceful shutdown not done by then: force off
settle_timeout: 30s      # an accepted power change shows by then, or it is asked again
retry_wait: 5s           # after a request the BMC failed
attempts: 3              # of each request, then the step gives up (for the operator)
repair_wait: 5m          # overdue: after the power cycle, before powering it off
exclude_states: [lost]   # records in these states are never powered off
keep_warm: 0             # expect machines until this many are expected or joined
join_deadline: 10m       # of the machines keep_warm expects (the controller's default)
idle_after: 30m          # open with no job this long: decommissioned, then powered off (off)
metrics_file: /var/lib/prometheus/node-exporter/xce-provisioner.prom
bmcs:
  rack1: {url: https://10.0.0.5, username_file: F, password_file: F, ca_file: F,
          timeout: 10s, read_retries: 2, auth: session}
machines:
  - {name: node1, instance_id: rf-node1, template: small, bmc: rack1,
     system: /redfish/v1/Systems/1}
```

Every problem is reported at once as `path: expected X, got Y (FILE line N)`; unknown keys
are errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xce_protocol import names, url_list
from xce_protocol.validation import Checker
from xce_protocol.yamlsource import LineDict, LineList, SourceError, load_file
from xce_provisioner.drivers.redfish import RedfishSettings
from xce_provisioner.plan import OFF_STATES, TO_RETURN, Machine, Policy

_TOP = (
    "controller",
    "interval",
    "graceful_timeout",
    "settle_timeout",
    "retry_wait",
    "attempts",
    "repair_wait",
    "exclude_states",
    "keep_warm",
    "join_deadline",
    "idle_after",
    "metrics_file",
    "bmcs",
    "machines",
)
EXCLUDABLE = tuple(sorted({*OFF_STATES, *TO_RETURN}))


class ConfigError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ControllerSettings:
    urls: tuple[str, ...]  # the controller, or its replicas in the order they are tried
    token_file: Path
    ca_file: Path | None = None
    timeout: float = 10.0


@dataclass(frozen=True)
class Config:
    controller: ControllerSettings
    policy: Policy
    bmcs: dict[str, RedfishSettings]
    machines: tuple[Machine, ...]
    interval: float = 1.0
    metrics_file: Path | None = None


def load(path: Path) -> Config:
    try:
        doc = load_file(path)
    except SourceError as exc:
        raise ConfigError([str(exc)]) from None
    c = Checker(str(path))
    config = _parse(doc, c)
    if c.problems or config is None:
        raise ConfigError(c.problems)
    return config


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _parse(doc: LineDict, c: Checker) -> Config | None:
    c.allowed_keys(doc, "", _TOP)
    ctl = _controller(doc, c)
    policy = _policy(doc, c)
    bmcs = _bmcs(doc, c)
    machines = _machines(doc, c, bmcs)
    interval = c.duration(doc, "interval", "", default=1.0, minimum=0.1, maximum=300)
    metrics = c.string(doc, "metrics_file", "", required=False)
    if ctl is None or policy is None or bmcs is None or machines is None or interval is None:
        return None
    return Config(ctl, policy, bmcs, machines, interval, _path(metrics))


def _controller(doc: LineDict, c: Checker) -> ControllerSettings | None:
    node = c.mapping(doc, "controller", "")
    if node is None:
        return None
    c.allowed_keys(node, "controller", ("url", "token_file", "ca_file", "timeout"))
    urls = url_list.parse(node, c)  # one URL or the replicas' list, as the agent's
    token = c.string(node, "token_file", "controller")
    ca = c.string(node, "ca_file", "controller", required=False)
    timeout = c.duration(node, "timeout", "controller", default=10.0, positive=True, maximum=300)
    if urls is None or token is None or timeout is None:
        return None
    return ControllerSettings(urls, Path(token), _path(ca), timeout)


def _policy(doc: LineDict, c: Checker) -> Policy | None:
    d = Policy()
    graceful = c.duration(doc, "graceful_timeout", "", default=d.graceful_timeout, positive=True)
    settle = c.duration(doc, "settle_timeout", "", default=d.settle_timeout, positive=True)
    retry = c.duration(doc, "retry_wait", "", default=d.retry_wait, positive=True)
    repair = c.duration(doc, "repair_wait", "", default=d.repair_wait, positive=True)
    attempts = c.integer(doc, "attempts", "", default=d.attempts, minimum=1, maximum=100)
    warm = c.integer(doc, "keep_warm", "", default=0, minimum=0, maximum=100_000)
    deadline = c.duration(doc, "join_deadline", "", default=None, positive=True)
    idle_after = c.duration(doc, "idle_after", "", default=None, positive=True)
    excluded = c.string_list(doc, "exclude_states", "")
    for index, state in enumerate(excluded or []):
        if state not in EXCLUDABLE:
            items = doc["exclude_states"]
            line = items.item_lines[index] if isinstance(items, LineList) else 0
            c.report(
                f"exclude_states[{index}]", f"one of {', '.join(EXCLUDABLE)}", repr(state), line
            )
    values = (graceful, settle, retry, repair, attempts, warm, excluded)
    if any(v is None for v in values):
        return None
    assert graceful and settle and retry and repair and attempts is not None and warm is not None
    return Policy(
        graceful_timeout=graceful,
        settle_timeout=settle,
        retry_wait=retry,
        attempts=attempts,
        repair_wait=repair,
        exclude_states=tuple(excluded or ()),
        keep_warm=warm,
        join_deadline=deadline,
        idle_after=idle_after,
    )


def _bmcs(doc: LineDict, c: Checker) -> dict[str, RedfishSettings] | None:
    node = c.mapping(doc, "bmcs", "")
    if node is None:
        return None
    found: dict[str, RedfishSettings] = {}
    ok = True
    keys = ("url", "username_file", "password_file", "ca_file", "timeout", "read_retries", "auth")
    for name in node:
        path = f"bmcs.{name}"
        item = c.mapping(node, name, "bmcs")
        if item is None:
            ok = False
            continue
        c.allowed_keys(item, path, keys)
        url = c.string(item, "url", path, expected="an http:// or https:// URL")
        if url is not None and not url.startswith(("http://", "https://")):
            c.report(f"{path}.url", "an http:// or https:// URL", repr(url), c.line_of(item, "url"))
            url = None
        user = c.string(item, "username_file", path, required=False)
        password = c.string(item, "password_file", path, required=False)
        ca = c.string(item, "ca_file", path, required=False)
        timeout = c.duration(item, "timeout", path, default=10.0, positive=True, maximum=120)
        retries = c.integer(item, "read_retries", path, default=2, minimum=0, maximum=10)
        auth = c.choice(item, "auth", path, ("session", "basic"), default="session")
        if url is None or timeout is None or retries is None or auth is None:
            ok = False
            continue
        found[str(name)] = RedfishSettings(
            url.rstrip("/"), _path(user), _path(password), _path(ca), timeout, retries, auth
        )
    return found if ok else None


def _machines(
    doc: LineDict, c: Checker, bmcs: dict[str, RedfishSettings] | None
) -> tuple[Machine, ...] | None:
    items = doc.get("machines")
    if not isinstance(items, LineList):
        c.report(
            "machines",
            "a list of machines",
            "nothing" if items is None else repr(items)[:60],
            c.line_of(doc, "machines"),
        )
        return None
    found: list[Machine] = []
    seen: dict[str, str] = {}
    for index, item in enumerate(items):
        path = f"machines[{index}]"
        if not isinstance(item, LineDict):
            c.report(path, "a mapping", repr(item)[:60], items.item_lines[index])
            continue
        c.allowed_keys(item, path, ("name", "instance_id", "template", "bmc", "system"))
        name = c.string(item, "name", path, expected="a host name")
        if name is not None and not names.is_host_name(name):
            c.report(f"{path}.name", "a host name", repr(name), c.line_of(item, "name"))
            name = None
        instance = c.string(item, "instance_id", path, expected="an instance id")
        if instance is not None and not names.is_instance_id(instance):
            c.report(
                f"{path}.instance_id",
                "an instance id",
                repr(instance),
                c.line_of(item, "instance_id"),
            )
            instance = None
        template = c.string(item, "template", path)
        bmc = c.string(item, "bmc", path)
        if bmc is not None and bmcs is not None and bmc not in bmcs:
            c.report(
                f"{path}.bmc",
                f"one of the bmcs ({', '.join(sorted(bmcs))})",
                repr(bmc),
                c.line_of(item, "bmc"),
            )
        system = c.string(
            item, "system", path, expected="a Redfish system path (/redfish/v1/Systems/ID)"
        )
        if system is not None and not system.startswith("/redfish/v1/Systems/"):
            c.report(
                f"{path}.system",
                "a Redfish system path (/redfish/v1/Systems/ID)",
                repr(system),
                c.line_of(item, "system"),
            )
            system = None
        for what, value in (("name", name), ("instance_id", instance)):
            if value is None:
                continue
            key = f"{what}:{value.lower()}"
            if key in seen:
                c.report(
                    f"{path}.{what}",
                    f"{'a name' if what == 'name' else 'an instance id'} no other machine has",
                    f"{value!r}, as {seen[key]}",
                    c.line_of(item, what),
                )
            seen[key] = path
        if name and instance and template and bmc and system:
            found.append(Machine(name, instance, template, bmc, system))
    return tuple(found)
