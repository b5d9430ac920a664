"""What the sample worker logs when the controller gives no answer: the TLS reason named, and
the CA variable the agent hands it, instead of an exception's class name."""

from __future__ import annotations

import ssl

import pytest
import requests
from urllib3.exceptions import SSLError as Urllib3SSLError

from xce_agent.sample_worker import unreachable


def test_an_untrusted_certificate_names_the_reason_and_the_ca_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "unable to get local issuer certificate"
    exc = requests.exceptions.SSLError(Urllib3SSLError(cause))
    monkeypatch.delenv("XCE_CONTROLLER_CA_FILE", raising=False)
    assert unreachable(exc) == (
        "TLS failed (unable to get local issuer certificate; XCE_CONTROLLER_CA_FILE: not set)"
    )
    monkeypatch.setenv("XCE_CONTROLLER_CA_FILE", "/etc/xce/ca.pem")
    assert unreachable(exc).endswith("XCE_CONTROLLER_CA_FILE: /etc/xce/ca.pem)")


def test_a_timeout_and_other_failures_are_named() -> None:
    assert unreachable(requests.exceptions.ReadTimeout()) == "timed out"
    assert unreachable(requests.exceptions.ConnectionError()) == (
        "connection failed (ConnectionError)"
    )
