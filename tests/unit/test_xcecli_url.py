"""xcecli --url: a URL that cannot be a controller's is a usage error (exit 2, one line), not a
connection attempt."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from xce_controller.cli.xcecli import controller_urls, main


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
