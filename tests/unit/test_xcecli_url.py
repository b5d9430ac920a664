"""xcecli --url: a URL that cannot be a controller's is a usage error (exit 2, one line), not a
connection attempt."""

from __future__ import annotations

import pytest
import requests
from click.testing import CliRunner

from xce_controller.cli.client import Client, controller_urls
from xce_controller.cli.xcecli import main


def test_good_urls_pass() -> None:
    assert controller_urls("http://127.0.0.1:8080/, https://[::1]:9") == [
        "http://127.0.0.1:8080",
        "https://[::1]:9",
    ]


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:port", "http://h:-1"])
def test_bad_port_is_a_usage_error(url: str) -> None:
    result = CliRunner().invoke(main, ["--url", url, "hosts"])
    assert result.exit_code == 2, result.output
    assert "--url: expected http(s) URLs" in result.output
    assert len(result.output.strip().splitlines()) == 1


def _answer(status: int, body: bytes, reason: str) -> requests.Response:
    response = requests.Response()
    response.status_code, response._content, response.reason = status, body, reason
    return response


def test_an_answer_that_is_not_a_controllers_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Something else on that port (a proxy's bare 404): the line must not be "404: " alone.
    monkeypatch.setattr(Client, "send", lambda self, *a, **k: _answer(404, b"", "Not Found"))
    result = CliRunner().invoke(main, ["--url", "http://127.0.0.1:9", "hosts"])
    assert result.exit_code == 1, result.output
    line = result.output.strip()
    assert line.startswith("xcecli: 404 Not Found from http://127.0.0.1:9"), line
    assert "not a controller's answer" in line
