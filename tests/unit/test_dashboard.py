"""monitoring/grafana-dashboard.json and alerts.yml only query metrics the project exports: the
controller's, read from a real exposition of its registry, and the agent's, from the families
its textfile renders."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from xce_controller.core.config import load_cluster_config
from xce_controller.http.metrics import Metrics
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
NAME = re.compile(r"\bxce_(?:agent|controller)_[a-z0-9_]+")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def controller_families(tmp_path: Path) -> dict[str, str]:
    """Family name -> type, as GET /metrics states them."""
    store = Store(tmp_path / "c.db")
    try:
        text = Metrics(Controller(load_cluster_config(None), store)).exposition().decode()
    finally:
        store.close()
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def agent_families() -> dict[str, str]:
    source = "".join(p.read_text() for p in (ROOT / "xce_agent" / "metrics").glob("*.py"))
    found = re.findall(r'"(xce_agent_[a-z_]+)",\s*"(gauge|counter)"', source)
    return {name + ("_total" if kind == "counter" else ""): kind for name, kind in found}


def exported(tmp_path: Path) -> set[str]:
    families = {**controller_families(tmp_path), **agent_families()}
    names = set(families)
    for name, kind in families.items():
        if kind == "histogram":
            names |= {name + part for part in HISTOGRAM_PARTS}
        if kind == "counter" and not name.endswith("_total"):  # prometheus_client's TYPE line
            names.add(name + "_total")
    return names


def dashboard() -> dict[str, Any]:
    result: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return result


def queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p["targets"]]


def test_the_exports_are_read_from_the_code(tmp_path: Path) -> None:
    names = exported(tmp_path)
    assert {"xce_controller_hosts", "xce_controller_drain_duration_seconds_bucket"} <= names
    assert {"xce_controller_joins_total", "xce_agent_component_restarts_total"} <= names
    assert len([n for n in names if n.startswith("xce_agent_")]) >= 20


def test_every_dashboard_query_uses_exported_metrics_only(tmp_path: Path) -> None:
    names = exported(tmp_path)
    used = {(title, name) for title, expr in queries() for name in NAME.findall(expr)}
    assert used, "no query names a metric"
    unknown = sorted((title, name) for title, name in used if name not in names)
    assert unknown == [], unknown
    assert {"xce_controller_hosts", "xce_agent_controller_contact"} <= {n for _, n in used}


def test_every_alert_uses_exported_metrics_only(tmp_path: Path) -> None:
    names = exported(tmp_path)
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    rules = [r for group in doc["groups"] for r in group["rules"]]
    unknown = sorted(
        (r["alert"], n) for r in rules for n in NAME.findall(r["expr"]) if n not in names
    )
    assert unknown == [], unknown


def test_a_metric_the_project_does_not_export_is_caught(tmp_path: Path) -> None:
    names = exported(tmp_path)
    assert "xce_controller_host" not in names and "xce_agent_component_up_total" not in names


def test_the_dashboard_loads_as_grafana_expects() -> None:
    doc = dashboard()
    assert doc["uid"] == "xce-fleet" and doc["schemaVersion"] >= 36
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in doc["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """promtool checks each query as a recording rule (Grafana's interval made 5m)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    rules = [
        {"record": f"xce:dashboard:{n}", "expr": expr.replace("$__rate_interval", "5m")}
        for n, (_, expr) in enumerate(queries())
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout
