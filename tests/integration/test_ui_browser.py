"""The status page in headless Chromium: sign in, filter, follow a host through its
decommission as it happens (the page refreshes from the events stream, never reloads).

Driven with Selenium and Debian's chromium-driver: WebDriver is the standard, Selenium is a
pip install, and neither needs a Node toolchain or a downloaded browser. Set
XCE_UI_SCREENSHOT=docs/ui.png to refresh the screenshot kept in docs/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.fleet_story import CONFIG as STORY
from tests.integration.fleet_story import write
from tests.integration.helpers import wait_for
from xce_controller.core.config import load_cluster_config
from xce_controller.http.server import EmbeddedController

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromium-driver not installed (Debian packages; make e2e-deps)",
)

CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 60s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {join_deadline: 10m, drain_timeout: 2s, drain_policy: requeue}
auth: {admin_token: adm1n, read_token: r3ad, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
  gpu: {slots: 8}
"""
ADMIN = {"Authorization": "Bearer adm1n"}
JOIN = {"Authorization": "Bearer j0in-t0ken"}


def admin(ctl: EmbeddedController, method: str, path: str, body: Any = None) -> Any:
    r = requests.request(method, ctl.url + path, json=body, headers=ADMIN, timeout=10)
    assert r.status_code < 300, r.text
    return r.json()


def join(ctl: EmbeddedController, name: str, instance: str = "") -> None:
    body = {"host": name, "instance_id": instance}
    r = requests.post(ctl.url + "/v1/join", json=body, headers=JOIN, timeout=10)
    assert r.status_code == 200, r.text


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[EmbeddedController]:
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    ctl = EmbeddedController(load_cluster_config(tmp_path / "cluster.yaml"), tmp_path / "c.db")
    ctl.start()
    for n in (1, 2):
        admin(ctl, "POST", "/v1/expected", {"instance_id": f"i-g{n}", "template": "gpu"})
        join(ctl, f"gpu{n}", f"i-g{n}")
    join(ctl, "cpu1")
    admin(
        ctl,
        "POST",
        "/v1/expected",
        {"instance_id": "i-late", "template": "gpu", "deadline_in": 0.5},
    )
    admin(ctl, "POST", "/v1/jobs", {"command": ["sleep", "60"], "slots": 1, "host": "gpu1"})

    # A record not joined yet has no host name: it is found by its instance id in the list.
    def late() -> str:
        states = {h["instance_id"]: h["state"] for h in admin(ctl, "GET", "/v1/expected")}
        return str(states["i-late"])

    wait_for(lambda: late() == "overdue")
    yield ctl
    ctl.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    assert CHROMIUM is not None and DRIVER is not None
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",  # as root Chromium refuses to start with its sandbox
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def until(driver: Any, condition: Any, timeout: float = 20.0) -> None:
    def holds() -> bool:
        try:
            return bool(condition(driver))
        except (StaleElementReferenceException, NoSuchElementException):
            return False  # the page refreshed or navigated under the lookup
        except WebDriverException as e:
            # Chrome's own word for a node whose page was replaced mid-lookup.
            if "does not belong to the document" in str(e):
                return False
            raise

    wait_for(holds, timeout=timeout, step=0.1)


def attrs(driver: Any, selector: str, name: str) -> list[str]:
    """One attribute of every match, read in one script: a refresh cannot split the read."""
    return list(
        driver.execute_script(
            "var n = arguments[1]; return Array.from(document.querySelectorAll(arguments[0]))"
            ".map(function (e) { return e.getAttribute(n) || ''; });",
            selector,
            name,
        )
    )


def rows(driver: Any, table: str) -> list[str]:
    return attrs(driver, f"#{table} tr[data-host]", "data-host")


def test_status_page_signs_in_filters_and_follows_a_decommission(
    ctl: EmbeddedController, browser: Any, tmp_path: Path
) -> None:
    browser.get(ctl.url + "/ui")
    assert browser.current_url.endswith("/ui/login")  # no token, no page
    browser.find_element(By.ID, "token").send_keys("wrong")
    browser.find_element(By.ID, "signin").click()
    until(browser, lambda d: "not the admin or read-only token" in d.page_source)
    browser.find_element(By.ID, "token").send_keys("r3ad")
    browser.find_element(By.ID, "signin").click()
    until(browser, lambda d: d.current_url.endswith("/ui"))

    counts = browser.find_element(By.ID, "counts").text
    assert "open 3" in counts and "overdue 1" in counts
    assert sorted(rows(browser, "hosts")) == ["cpu1", "gpu1", "gpu2", "i-late"]
    returns = browser.find_element(By.ID, "to-return").text
    assert "i-late" in returns and "not joined by its deadline" in returns
    assert "join_deadline_missed" in returns
    assert "joined_provisioned" in browser.find_element(By.ID, "hosts").text

    Select(browser.find_element(By.ID, "f-template")).select_by_value("gpu")
    Select(browser.find_element(By.ID, "f-state")).select_by_value("open")
    browser.find_element(By.ID, "f-apply").click()
    until(browser, lambda d: sorted(rows(d, "hosts")) == ["gpu1", "gpu2"])

    # The overview follows the events stream: a host closed elsewhere drops out of the
    # open filter without a reload.
    until(browser, lambda d: d.find_element(By.ID, "live").text == "live")
    browser.execute_script("window.xceMarker = 1")
    admin(ctl, "POST", "/v1/hosts/gpu2/close", {})
    until(browser, lambda d: rows(d, "hosts") == ["gpu1"])
    assert browser.execute_script("return window.xceMarker") == 1

    browser.find_element(By.LINK_TEXT, "gpu1").click()
    until(browser, lambda d: d.current_url.endswith("/ui/hosts/gpu1"))
    until(browser, lambda d: d.find_element(By.ID, "live").text == "live")
    assert "gpu1 is open" in browser.find_element(By.ID, "host-state").text
    browser.execute_script("window.xceMarker = 2")
    admin(ctl, "POST", "/v1/hosts/gpu1/decommission", {"reason": "scale in"})
    until(browser, lambda d: "draining" in d.find_element(By.ID, "host-state").text)
    until(browser, lambda d: "decommissioned" in d.find_element(By.ID, "host-state").text)
    assert "drain_timeout_requeued" in browser.find_element(By.ID, "timeline").text
    story = browser.find_element(By.ID, "story").text
    assert "decommission requested by admin: scale in" in story
    assert "job 1 requeued" in story and "after the decommission request" in story
    kinds = [
        r.get_attribute("data-kind")
        for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr[data-kind]")
    ]
    assert kinds[:2] == ["expected", "joined"] and kinds[-1] == "state"
    assert browser.execute_script("return window.xceMarker") == 2  # updated in place

    browser.get(ctl.url + "/ui")
    until(browser, lambda d: "decommissioned 1" in d.find_element(By.ID, "counts").text)
    shot = Path(os.environ.get("XCE_UI_SCREENSHOT") or tmp_path / "ui.png")
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_status_page_and_its_stream_refuse_without_a_token(ctl: EmbeddedController) -> None:
    r = requests.get(ctl.url + "/ui", allow_redirects=False, timeout=5)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert requests.get(ctl.url + "/ui/events", timeout=5).status_code == 401
    for wrong in ("wrong", "r3ad"):  # the cookie holds a value derived from it, not the token
        r = requests.get(
            ctl.url + "/ui", cookies={"xce_view": wrong}, allow_redirects=False, timeout=5
        )
        assert r.status_code == 303
    cookie = {"xce_view": "wrong"}
    assert (
        requests.get(
            ctl.url + "/ui/hosts/gpu1", cookies=cookie, allow_redirects=False, timeout=5
        ).status_code
        == 303
    )
    page = requests.get(ctl.url + "/ui", headers={"Authorization": "Bearer r3ad"}, timeout=5)
    assert page.status_code == 200 and "gpu1" in page.text
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'self'
    assert "<script>" not in page.text  # nothing inline: the policy forbids it


def test_page_escapes_what_admins_and_hosts_wrote(ctl: EmbeddedController) -> None:
    admin(ctl, "POST", "/v1/hosts/gpu2/close", {"reason": "<script>alert(1)</script>"})
    headers = {"Authorization": "Bearer r3ad"}
    for path in ("/ui", "/ui/hosts/gpu2", "/ui?q=%3Cscript%3E"):
        page = requests.get(ctl.url + path, headers=headers, timeout=5).text
        assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def sign_in(browser: Any, url: str) -> None:
    browser.get(url + "/ui/login")
    browser.find_element(By.ID, "token").send_keys("r3ad")
    browser.find_element(By.ID, "signin").click()
    until(browser, lambda d: d.current_url.endswith("/ui"))


def lanes(driver: Any) -> dict[str, int]:
    names = attrs(driver, "#fleet g[data-lane]", "data-lane")
    return dict(zip(names, map(int, attrs(driver, "#fleet g[data-lane]", "data-total"))))


def bands(driver: Any) -> dict[str, int]:
    names = attrs(driver, "#fleet polygon[data-state]", "data-state")
    return dict(zip(names, map(int, attrs(driver, "#fleet polygon[data-state]", "data-now"))))


def test_a_large_fleet_shows_a_page_at_a_time_and_draws_its_last_hours(
    tmp_path: Path, browser: Any
) -> None:
    (tmp_path / "cluster.yaml").write_text(STORY)
    cfg = load_cluster_config(tmp_path / "cluster.yaml")
    left = write(tmp_path / "c.db", cfg)
    assert (left["open"], left["lost"], left["expected"], left["returned"]) == (227, 17, 3, 50)
    ctl = EmbeddedController(cfg, tmp_path / "c.db").start()
    try:
        sign_in(browser, ctl.url)
        shown = browser.find_element(By.ID, "shown").text
        assert (
            shown == "(1-50 of 247 matching, 307 in all; 60 decommissioned or returned not shown)"
        )
        assert len(rows(browser, "hosts")) == 50
        assert browser.execute_script("return document.body.scrollHeight") < 4000
        # The picture, drawn by the controller from the hosts' histories.
        # Bands of every state the window saw, with its count now.
        assert bands(browser) == {
            "open": 227,
            "closed": 0,
            "draining": 0,
            "lost": 17,
            "expected": 3,
        }
        assert lanes(browser) == {"drains": 60, "losses": 17, "notices": 12}
        legend = browser.find_element(By.ID, "fleet-legend").text
        assert "open 227" in legend and "lost 17" in legend
        label = browser.find_element(By.ID, "fleet").get_attribute("aria-label")
        assert (
            label == "Live hosts by state over the last 6 hours: now 227 open, 17 lost, 3 expected"
        )
        shot = os.environ.get("XCE_UI_FLEET_SCREENSHOT") or str(tmp_path / "fleet.png")
        assert browser.save_screenshot(shot)

        browser.find_element(By.ID, "page-next").click()
        until(browser, lambda d: d.find_element(By.ID, "shown").text.startswith("(51-100 of 247"))
        assert "page=2" in browser.current_url and len(rows(browser, "hosts")) == 50
        browser.get(ctl.url + "/ui?page=5")
        assert browser.find_element(By.ID, "shown").text.startswith("(201-247 of 247")
        assert "page-next" not in browser.page_source
        # The past on request: the box, or a state filter naming it.
        browser.get(ctl.url + "/ui")
        browser.find_element(By.ID, "f-all").click()
        browser.find_element(By.ID, "f-apply").click()
        until(
            browser,
            lambda d: d.find_element(By.ID, "shown").text == "(1-50 of 307 matching, 307 in all)",
        )
        browser.get(ctl.url + "/ui")
        Select(browser.find_element(By.ID, "f-state")).select_by_value("returned")
        browser.find_element(By.ID, "f-apply").click()
        until(browser, lambda d: "of 50 matching" in d.find_element(By.ID, "shown").text)
        assert set(attrs(browser, "#hosts tr[data-host]", "data-state")) == {"returned"}
        # Another window; the picture follows the events stream like the rest of the page.
        browser.get(ctl.url + "/ui")
        browser.find_element(By.LINK_TEXT, "1h").click()
        until(
            browser,
            lambda d: "last hour" in d.find_element(By.ID, "fleet").get_attribute("aria-label"),
        )
        assert lanes(browser) == {"drains": 0, "losses": 0, "notices": 0}
        until(browser, lambda d: d.find_element(By.ID, "live").text == "live")
        browser.execute_script("window.xceMarker = 3")
        admin(ctl, "POST", "/v1/hosts/node030/decommission", {"reason": "scale in"})
        until(browser, lambda d: lanes(d)["drains"] == 1)
        assert browser.execute_script("return window.xceMarker") == 3  # updated in place
    finally:
        ctl.stop()
