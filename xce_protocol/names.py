"""What a host name, an instance id, a template name and a bearer token may be, for both sides
of the protocol.

The controller keys provisioned records by instance id and the others by `host:NAME`; a name
that could be mistaken for a key (a colon), or that cannot travel in a URL path unescaped (a
slash, a percent sign, a space), is refused at the door rather than misread later.
"""

from __future__ import annotations

import re

# RFC 1123 labels, dot-separated; the first character alphanumeric. No colon: never a key.
HOST_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*$"
HOST_NAME_MAX = 253
# Cloud instance ids: i-0abc (AWS), numbers (GCE), UUIDs (Azure, OpenStack), names elsewhere.
INSTANCE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
INSTANCE_ID_MAX = 128
TEMPLATE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
TEMPLATE_MAX = 63

# Leases (xce_controller/core/leases.py): lower case, so one lease is never two spellings.
LEASE_NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
# A lease's fencing token as it is written (the query of a provisioner's call, its
# XCE_LEASE_TOKEN): plain decimal, so "+2", "02" and " 2" are not 2; at most 2**53, exact as a
# JSON number.
LEASE_TOKEN = r"^(0|[1-9][0-9]{0,15})$"  # noqa: S105 - a pattern, no secret
LEASE_TOKEN_MAX = 2**53


def is_lease_token(text: str) -> bool:
    return re.fullmatch(LEASE_TOKEN, text) is not None and int(text) <= LEASE_TOKEN_MAX


# The same, or nothing (optional fields of the wire protocol).
INSTANCE_ID_OR_NONE = r"^(|[A-Za-z0-9][A-Za-z0-9_.-]{0,127})$"
TEMPLATE_OR_NONE = r"^(|[A-Za-z0-9][A-Za-z0-9_.-]{0,62})$"
HOST_NAME_OR_NONE = (
    r"^(|[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*)$"
)

# A token travels in an Authorization header as it is: printable ASCII, no space (a BOM, a
# newline or a non-ASCII character could not be sent, or not as it is written).
BEARER_TOKEN = r"[\x21-\x7e]{1,4096}"  # noqa: S105 - a pattern, not a secret

_HOST_RE = re.compile(HOST_NAME)
_TOKEN_RE = re.compile(BEARER_TOKEN)
_INSTANCE_RE = re.compile(INSTANCE_ID)
_TEMPLATE_RE = re.compile(TEMPLATE)
_LEASE_RE = re.compile(LEASE_NAME)


def is_host_name(text: str) -> bool:
    return len(text) <= HOST_NAME_MAX and _HOST_RE.fullmatch(text) is not None


def is_instance_id(text: str) -> bool:
    return _INSTANCE_RE.fullmatch(text) is not None


def is_template(text: str) -> bool:
    return _TEMPLATE_RE.fullmatch(text) is not None


def is_lease_name(text: str) -> bool:
    return _LEASE_RE.fullmatch(text) is not None


def is_bearer_token(text: str) -> bool:
    return _TOKEN_RE.fullmatch(text) is not None
