"""HTML of the status page, rendered on the server from the API's own JSON forms.

Pure functions of data and time: no request, no controller. Every value is escaped. The page
works without JavaScript (filters are a GET form); /ui/app.js only refreshes the main part
when the events stream says something was committed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from xce_controller.core.story import duration

STATES = (
    "expected",
    "overdue",
    "open",
    "closed",
    "draining",
    "lost",
    "decommissioned",
    "returned",
)

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .5em; } h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; } th, td { padding: .25em .7em; text-align: left; }
th { background: #eee; } tr:nth-child(even) td { background: #f7f7f7; }
.counts span { display: inline-block; margin-right: 1em; padding: .2em .6em;
  border-radius: .3em; background: #eef; }
.state { font-weight: 600; } .code { font-family: monospace; color: #555; }
.s-lost, .s-overdue { color: #b00; } .s-draining { color: #b60; } .s-open { color: #070; }
form { margin: .5em 0; } .muted { color: #777; } .live { float: right; font-size: .9em; }
#fleet { display: block; width: 100%; max-width: 960px; height: auto; margin: .3em 0 .6em; }
.pages a, .pages span { margin-right: .8em; } .windows a { margin-left: .5em; }
.windows b { margin-left: .5em; }
"""

JS = """
(function () {
  var main = document.getElementById('main');
  if (!main || !window.EventSource) { return; }
  var since = main.getAttribute('data-seq') || '0';
  var host = main.getAttribute('data-host') || '';
  var url = '/ui/events?since=' + encodeURIComponent(since) +
    (host ? '&host=' + encodeURIComponent(host) : '');
  var source = new EventSource(url);
  var pending = null;
  var live = document.getElementById('live');
  function refresh() {
    pending = null;
    var part = location.search ? location.search + '&part=main' : '?part=main';
    fetch(location.pathname + part, {credentials: 'same-origin'})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        main.innerHTML = html;
        var n = Number(document.body.getAttribute('data-refreshes') || '0') + 1;
        document.body.setAttribute('data-refreshes', String(n));
      })
      .catch(function () { if (live) { live.textContent = 'refresh failed'; } });
  }
  source.onopen = function () { if (live) { live.textContent = 'live'; } };
  source.onerror = function () { if (live) { live.textContent = 'reconnecting'; } };
  source.onmessage = function () { if (!pending) { pending = setTimeout(refresh, 150); } };
})();
"""


def _clock(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def page(title: str, main: str, seq: int, host: str = "") -> str:
    """A whole page; `main` is what the events stream refreshes."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title><link rel=stylesheet href=/ui/app.css></head>"
        f"<body data-refreshes=0><span id=live class=live>connecting</span>{SIGN_OUT}"
        f"<h1><a href=/ui>XCE hosts</a>{' / ' + escape(host) if host else ''}</h1>"
        f'<div id=main data-seq="{seq}" data-host="{escape(host)}">{main}</div>'
        "<script src=/ui/app.js></script></body></html>"
    )


SIGN_OUT = (
    "<form method=post action=/ui/logout class=live id=signout-form>"
    "<button type=submit id=signout>Sign out</button></form>"
)


def still_page(title: str, main: str) -> str:
    """A page with nothing to follow (no such host): no events stream, no refreshes."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title><link rel=stylesheet href=/ui/app.css></head>"
        f"<body>{SIGN_OUT}<h1><a href=/ui>XCE hosts</a></h1><div id=main>{main}</div>"
        "</body></html>"
    )


def login_page(problem: str = "") -> str:
    note = f"<p class=s-lost>{escape(problem)}</p>" if problem else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>XCE: sign in</title>"
        "<link rel=stylesheet href=/ui/app.css></head><body><h1>XCE hosts</h1>"
        f"{note}<form method=post action=/ui/login><label>Admin or read-only token "
        "<input type=password name=token id=token autocomplete=off></label> "
        "<button type=submit id=signin>Show</button></form></body></html>"
    )


def _since(host: dict[str, Any]) -> float | None:
    history = host.get("history") or []
    return history[-1]["at"] if history else None


def _code(host: dict[str, Any]) -> str:
    history = host.get("history") or []
    return str(history[-1].get("code", "")) if history else ""


def _link(host: dict[str, Any]) -> str:
    ref = host.get("name") or host["key"]
    label = host.get("name") or host.get("expected_name") or host["key"]
    return f'<a href="/ui/hosts/{quote(ref, safe="")}">{escape(label)}</a>'


PAGE_SIZE = 50  # host rows per page: 300 rows made a page 14,000 pixels tall
PAST = ("decommissioned", "returned")  # hidden unless asked for, like `xcecli hosts`
WINDOWS = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 24 * 3600.0}


def overview(
    hosts: list[dict[str, Any]],
    to_return: list[dict[str, Any]],
    templates: Iterable[str],
    filters: dict[str, str],
    now: float,
    chart: str = "",
    page: int = 1,
) -> str:
    """Counts by state, the fleet's picture, the filter form, one page of the host table and
    the to-return list."""
    counts = {s: 0 for s in STATES}
    for h in hosts:
        counts[h["state"]] = counts.get(h["state"], 0) + 1
    parts = ["<div class=counts id=counts>"]
    parts += [f'<span data-state="{s}">{s} <b>{n}</b></span>' for s, n in counts.items()]
    parts.append("</div>")
    if chart:
        parts.append(_windows(filters) + chart)
    parts.append(_filter_form(templates, filters))
    shown = [h for h in hosts if _matches(h, filters)]
    pages = max(1, -(-len(shown) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    rows = shown[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    hidden = "" if filters.get("all") or filters.get("state") in PAST else _hidden(counts)
    first = (page - 1) * PAGE_SIZE + 1 if rows else 0
    parts.append(
        f"<h2>Hosts <span class=muted id=shown>({first}-{first + len(rows) - 1 if rows else 0}"
        f" of {len(shown)} matching, {len(hosts)} in all{hidden})</span></h2>"
    )
    parts.append(_host_table(rows, now))
    parts.append(_pager(filters, page, pages))
    parts.append(f"<h2>To return <span class=muted>({len(to_return)})</span></h2>")
    parts.append(_return_table(to_return, now))
    return "".join(parts)


def _hidden(counts: dict[str, int]) -> str:
    n = sum(counts[s] for s in PAST)
    return f"; {n} decommissioned or returned not shown" if n else ""


def _query(filters: dict[str, str], **change: str) -> str:
    merged = {**filters, **change}
    return "/ui?" + urlencode({k: v for k, v in merged.items() if v})


def _pager(filters: dict[str, str], page: int, pages: int) -> str:
    if pages == 1:
        return ""
    out = ["<p class=pages id=pages>"]
    if page > 1:
        out.append(
            f'<a id=page-prev href="{escape(_query(filters, page=str(page - 1)))}">'
            "&larr; previous</a>"
        )
    out.append(f"<span>page {page} of {pages}</span>")
    if page < pages:
        out.append(
            f'<a id=page-next href="{escape(_query(filters, page=str(page + 1)))}">next &rarr;</a>'
        )
    out.append("</p>")
    return "".join(out)


def _windows(filters: dict[str, str]) -> str:
    chosen = filters.get("window") or "6h"
    links = [
        f"<b>{w}</b>"
        if w == chosen
        else f'<a href="{escape(_query(filters, window=w, page=""))}">{w}</a>'
        for w in WINDOWS
    ]
    return f"<h2 class=windows>Fleet, last {''.join(links)}</h2>"


def _matches(host: dict[str, Any], f: dict[str, str]) -> bool:
    if f.get("state") and host["state"] != f["state"]:
        return False
    if not f.get("state") and not f.get("all") and host["state"] in PAST:
        return False
    if f.get("template") and host["template"] != f["template"]:
        return False
    text = f.get("q", "").lower()
    if text:
        hay = " ".join(
            str(host.get(k) or "") for k in ("name", "instance_id", "expected_name", "reason")
        )
        return text in (hay + " " + _code(host)).lower()
    return True


def _options(values: Iterable[str], chosen: str, blank: str) -> str:
    opts = [f'<option value="">{blank}</option>']
    for v in values:
        sel = " selected" if v == chosen else ""
        opts.append(f'<option value="{escape(v)}"{sel}>{escape(v)}</option>')
    return "".join(opts)


def _filter_form(templates: Iterable[str], f: dict[str, str]) -> str:
    checked = " checked" if f.get("all") else ""
    window = f.get("window", "")
    keep = f'<input type=hidden name=window value="{escape(window)}">' if window else ""
    return (
        "<form method=get action=/ui id=filters>"
        f"<select name=state id=f-state>{_options(STATES, f.get('state', ''), 'any state')}"
        "</select> "
        f"<select name=template id=f-template>"
        f"{_options(sorted(templates), f.get('template', ''), 'any template')}</select> "
        f'<input name=q id=f-q placeholder="name, instance, reason" '
        f'value="{escape(f.get("q", ""))}"> '
        f"<label><input type=checkbox name=all value=1 id=f-all{checked}>"
        f" decommissioned and returned too</label>{keep}"
        " <button type=submit id=f-apply>Filter</button> <a href=/ui>clear</a></form>"
    )


def _host_table(hosts: list[dict[str, Any]], now: float) -> str:
    head = "<tr><th>Host<th>State<th>Template<th>Instance<th>Jobs<th>Since<th>Reason<th>Code"
    rows = []
    for h in hosts:
        since = _since(h)
        age = f" ({duration(now - since)})" if since else ""
        rows.append(
            f'<tr data-host="{escape(h.get("name") or h["key"])}" data-state="{h["state"]}">'
            f"<td>{_link(h)}<td class='state s-{h['state']}'>{h['state']}"
            f"<td>{escape(h['template'])}<td>{escape(h.get('instance_id') or '-')}"
            f"<td>{h.get('jobs_running', 0)}<td>{_clock(since)}{age}"
            f"<td>{escape(h.get('reason') or '')}<td class=code>{escape(_code(h))}"
        )
    body = "".join(rows) or "<tr><td colspan=8 class=muted>no host matches"
    return f"<table id=hosts>{head}{body}</table>"


def _return_table(hosts: list[dict[str, Any]], now: float) -> str:
    head = "<tr><th>Instance<th>Host<th>State<th>Waiting<th>Reason<th>Code"
    rows = []
    for h in sorted(hosts, key=lambda h: _since(h) or now):
        since = _since(h)
        rows.append(
            f'<tr data-instance="{escape(h.get("instance_id") or "")}">'
            f"<td>{escape(h.get('instance_id') or '-')}<td>{_link(h)}"
            f"<td class='state s-{h['state']}'>{h['state']}"
            f"<td>{duration(now - since) if since else '-'}<td>{escape(h.get('reason') or '')}"
            f"<td class=code>{escape(_code(h))}"
        )
    body = "".join(rows) or "<tr><td colspan=6 class=muted>nothing to return"
    return f"<table id=to-return>{head}{body}</table>"


def timeline(host: dict[str, Any], story: list[str], events: list[dict[str, Any]]) -> str:
    """One host: its story in words, then every event about it."""
    parts = [
        f"<p id=host-state class='state s-{host['state']}'>{escape(story[0])}</p>",
        "<h2>Why</h2><ol id=story>",
        *(f"<li>{escape(line)}" for line in story[1:]),
        "</ol><h2>Timeline</h2><table id=timeline>",
        "<tr><th>#<th>At<th>Event<th>By<th>Why<th>Code",
    ]
    for e in events:
        what = e["kind"] + (f": {e['state']}" if e.get("state") else "")
        what += f" (job {e['job']})" if e.get("job") is not None else ""
        code = e.get("code") or e["data"].get("code") or ""
        parts.append(
            f"<tr data-kind='{escape(e['kind'])}'><td>{e['seq']}<td>{_clock(e['at'])}"
            f"<td>{escape(what)}<td>{escape(e['by'])}<td>{escape(e.get('why') or '')}"
            f"<td class=code>{escape(str(code))}"
        )
    parts.append("</table>")
    return "".join(parts)
