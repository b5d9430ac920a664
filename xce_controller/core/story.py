"""`xcecli why HOST`: a host's story in plain words, told from its facts.

Pure: takes the host as the API shows it and its events (the facts about it, oldest first)
and returns lines. Each step says when, what, who, why and how long after the step it
follows from (joined 2m after it was expected, decommissioned 40s after the request).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Event = dict[str, Any]


def duration(seconds: float) -> str:
    """3s, 4m05s, 2h10m, 3d4h: short, and exact enough for a person."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _by(event: Event) -> str:
    return f" by {event['by']}" if event.get("by") else ""


def _why(event: Event) -> str:
    code = event.get("code") or event["data"].get("code")
    why = event.get("why") or ""
    if code and why:
        return f": {why} [{code}]"
    return f": {why}" if why else (f" [{code}]" if code else "")


class _Teller:
    """Turns events into sentences, remembering what later steps are measured from."""

    def __init__(self, name: str = "") -> None:
        self.name = name  # whose story: a lease's grant to another host is this one's loss
        self.marks: dict[str, float] = {}  # expected, joined, drain, gone, job:N
        self.told: list[tuple[float, str]] = []

    def say(self, at: float, text: str) -> None:
        self.told.append((at, f"{_clock(at)}  {text}"))

    @property
    def lines(self) -> list[str]:
        return [line for _, line in sorted(self.told, key=lambda t: t[0])]  # stable: in order

    def after(self, mark: str, at: float) -> str:
        since = self.marks.get(mark)
        return f" ({duration(at - since)} after {_MARK_WORDS[mark]})" if since is not None else ""

    def tell(self, event: Event) -> None:
        handler = _KINDS.get(event["kind"])
        if handler is not None:
            handler(self, event)
        else:  # a kind newer than this client: say it plainly rather than hide it
            self.say(event["at"], f"{event['kind']}{_by(event)}{_why(event)}")


_MARK_WORDS = {
    "expected": "it was expected",
    "joined": "it joined",
    "drain": "the decommission request",
    "gone": "it left the cluster",
}


def _expected(t: _Teller, e: Event) -> None:
    d = e["data"]
    t.marks["expected"] = e["at"]
    deadline = d.get("deadline")
    until = f", to join within {duration(deadline - e['at'])}" if deadline else ""
    t.say(
        e["at"],
        f"expected: instance {d.get('instance_id', '-')} of template {d.get('template', '-')}"
        f"{_by(e)}{until}",
    )


def _joined(t: _Teller, e: Event) -> None:
    d = e["data"]
    how = "provisioned instance" if d.get("provisioned") else "unprovisioned host"
    where = f" from {', '.join(d['addresses'])}" if d.get("addresses") else ""
    text = f"joined as {d.get('name', '-')} ({how} {d.get('instance_id') or '-'}){where}"
    code = f" [{e['code']}]" if e.get("code") else ""
    t.say(e["at"], text + t.after("expected", e["at"]) + _why_only(e, "joined") + code)
    t.marks["joined"] = e["at"]


def _why_only(e: Event, plain: str) -> str:
    why = e.get("why") or ""
    return f": {why}" if why and not why.startswith(plain) else ""


def _rejoined(t: _Teller, e: Event) -> None:
    t.say(e["at"], f"joined again as the same instance (a reconnect, not a new host){_why(e)}")


def _code(e: Event) -> str:
    return f" [{e['code']}]" if e.get("code") else ""


def _renewed(t: _Teller, e: Event) -> None:
    incarnation = e["data"].get("incarnation", "-")
    t.say(
        e["at"],
        f"its agent resumed with its credential; incarnation {incarnation} issued{_code(e)}",
    )


def _confirmed(t: _Teller, e: Event) -> None:
    t.say(e["at"], f"its renewed credential came back: earlier ones are stale now{_code(e)}")


def _refused(t: _Teller, e: Event) -> None:
    """A refused attempt the controller recorded: a stale credential, a second join."""
    detail = e["data"].get("detail") or e["data"].get("why") or "-"
    t.say(e["at"], f"an attempt{_by(e)} refused: {detail}{_code(e)}")


def _state(t: _Teller, e: Event) -> None:
    state, at = e.get("state", ""), e["at"]
    mark = ""
    if state == "decommissioned":
        mark = "drain" if "drain" in t.marks else "joined"
    elif state in ("returned", "open") and "gone" in t.marks:
        mark = "gone"  # returned, or heard from again after it was lost
    t.say(at, f"{state}{_by(e)}{_why(e)}{t.after(mark, at) if mark else ''}")
    if state in ("decommissioned", "lost", "overdue"):
        t.marks["gone"] = at


def _drain(t: _Teller, e: Event) -> None:
    d = e["data"]
    t.marks["drain"] = e["at"]
    timeout = d.get("timeout")
    limit = f", drain timeout {duration(timeout)}" if timeout is not None else ", no timeout"
    why = f": {e['why']}" if e.get("why") else ""
    code = f" [{e['code']}]" if e.get("code") else ""
    t.say(e["at"], f"decommission requested{_by(e)}{why} (policy {d.get('policy')}{limit}){code}")


def _job(verb: str) -> Callable[[_Teller, Event], None]:
    def tell(t: _Teller, e: Event) -> None:
        job_id = e["data"].get("id")
        mark = f"job:{job_id}"
        since = t.marks.get(mark)
        ran = f" after {duration(e['at'] - since)}" if since is not None else ""
        code = e["data"].get("exit_code")
        exit_text = f" with exit code {code}" if code is not None else ""
        t.say(e["at"], f"job {job_id} {verb}{exit_text}{ran}{_why(e)}")
        if verb.startswith(("placed", "started")):
            t.marks[mark] = e["at"]

    return tell


def _notice(t: _Teller, e: Event) -> None:
    notice = e["data"].get("notice")
    code = f" [{e['code']}]" if e.get("code") else ""
    if not notice:
        t.say(e["at"], f"the cloud notice is over{_by(e)}{code}")
        return
    when = notice.get("deadline")
    lead = (
        f", the platform acts in {duration(when - e['at'])}"
        if isinstance(when, (int, float))
        else ""
    )
    acted = " (acted on: its jobs requeued)" if notice.get("acted") else ""
    if notice.get("kind") == "stop":  # not the cloud's: the agent was stopped on purpose
        drain = f", its jobs drain for {duration(when - e['at'])}" if lead else ""
        t.say(e["at"], f"planned stop of the agent{drain}{acted}{code}")
        return
    provider = f" from {notice['provider']}" if notice.get("provider") else ""
    t.say(e["at"], f"cloud notice: {notice.get('kind', 'notice')}{provider}{lead}{acted}{code}")


def _lease_granted(t: _Teller, e: Event) -> None:
    d = e["data"]
    lease, token, host = d.get("lease", "-"), d.get("token", "-"), str(d.get("host", ""))
    if host.lower() != t.name.lower():  # taken over from this host
        t.say(
            e["at"],
            f"lease {lease} lost: its grant ran out and {host} got it, token {token}{_code(e)}",
        )
        return
    how = ""
    if e.get("code") == "lease_taken_over":
        how = f", taken over from {d.get('previous') or '-'} (its grant had run out)"
    elif e.get("code") == "lease_regranted":
        how = ", again: its own grant had run out"
    t.say(e["at"], f"lease {lease} granted, token {token}{how}{_code(e)}")


def _lease_released(t: _Teller, e: Event) -> None:
    d = e["data"]
    t.say(e["at"], f"lease {d.get('lease', '-')} given back, token {d.get('token', '-')}{_code(e)}")


_POWER_WORDS = {
    "on": "power on",
    "shutdown": "graceful shutdown",
    "force_off": "force off",
    "cycle": "power cycle",
    "ack": "return",
}


def _power(t: _Teller, e: Event) -> None:
    """A provisioner's power step: intent before the BMC call, then its outcome."""
    d = e["data"]
    what = _POWER_WORDS.get(str(d.get("action")), str(d.get("action", "power")))
    attempt = int(d.get("attempt", 1) or 1)
    again = f" (attempt {attempt})" if attempt > 1 else ""
    phase = str(d.get("phase", ""))
    t.say(e["at"], f"{what} {phase}{again}{_by(e)}{_why(e)}")


_KINDS: dict[str, Callable[[_Teller, Event], None]] = {
    "expected": _expected,
    "joined": _joined,
    "rejoined": _rejoined,
    "renewed": _renewed,
    "confirmed": _confirmed,
    "refused": _refused,
    "state": _state,
    "drain": _drain,
    "notice": _notice,
    "power": _power,
    "lease_granted": _lease_granted,
    "lease_released": _lease_released,
    "job_assigned": _job("placed on it"),
    "job_started": _job("started"),
    "job_finished": _job("finished"),
    "job_requeued": _job("requeued"),
    "job_killed": _job("killed"),
    "job_submitted": lambda t, e: None,  # not about a host
    "job_waiting": lambda t, e: None,
}


JOB_LINES = 12  # job events told one by one; earlier ones are summed up in one line


def _summary(jobs: list[Event]) -> str:
    ended = [e["kind"].removeprefix("job_") for e in jobs if e["kind"] != "job_assigned"]
    counts = ", ".join(f"{ended.count(k)} {k}" for k in sorted(set(ended)))
    ids = {e["data"].get("id") for e in jobs}
    return f"{len(ids)} earlier jobs ({counts or 'none ended'}), told in `xcecli events`"


def story(host: dict[str, Any], events: list[Event], now: float) -> list[str]:
    """The lines `xcecli why` prints for `host` (a /v1/hosts/NAME answer)."""
    name = host.get("name") or host.get("expected_name") or host["key"]
    teller = _Teller(name)
    jobs = [e for e in events if e["kind"].startswith("job_")]
    quiet = jobs[:-JOB_LINES] if len(jobs) > 2 * JOB_LINES else []
    skipped = {id(e) for e in quiet if e["kind"] != "job_requeued" and e["kind"] != "job_killed"}
    for event in events:
        if quiet and event is quiet[0]:
            teller.say(event["at"], _summary(quiet))
        if id(event) not in skipped:
            teller.tell(event)
    report = host.get("report")
    if report and host.get("state") in ("decommissioned", "returned"):
        words = report.get("agent_state") or "no state"
        teller.say(
            report["at"],
            f"its agent was refused and reported: {words} [refused_decommissioned]"
            + teller.after("gone", report["at"]),
        )
    head = f"{name} is {host['state']}"
    if host.get("reason"):
        head += f": {host['reason']}"
    if host.get("code"):
        head += f" [{host['code']}]"
    changed = host["history"][-1]["at"] if host.get("history") else None
    if changed:
        head += f" (for {duration(now - changed)})"
    return [head, *teller.lines]
