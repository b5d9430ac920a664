"""`xce-agent render-user-data`: the cloud-init user-data a provisioner hands a new instance.

It writes /etc/xce/agent.yaml (and the join token, mode 0600, and the CA if given) with
cloud-init's write_files, creates the worker's user if one is named (cloud-init's users:, a
system user without a login shell), then enables and starts the agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from xce_protocol import names

TOKEN_PATH = "/etc/xce/join-token"  # noqa: S105 - where the token goes, not a token
CA_PATH = "/etc/xce/ca.pem"
NOLOGIN = "/usr/sbin/nologin"
# What useradd takes for a system user on Debian and its kin (NAME_REGEX_SYSTEM, 32 bytes).
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def user_name_problem(name: str) -> str:
    """Why `name` cannot be the worker user cloud-init creates; "" if it can."""
    if name == "root":
        return "a user other than root (leave the option out to run the worker as root)"
    if not USER_NAME.fullmatch(name):
        return "a user name cloud-init can create (a-z, 0-9, _ and -, up to 32, not a number)"
    return ""


def token_problem(token: str) -> str:
    """Why the agent could not join with `token` (read from --token-file); "" if it can."""
    if not token:
        return "a join token, got an empty file"
    if len(token) > 4096 or not names.is_bearer_token(token):
        return "a join token of printable ASCII without spaces (as the agent requires)"
    return ""


@dataclass(frozen=True)
class UserData:
    controller_url: str
    template: str = "default"
    roles: tuple[str, ...] = ("worker",)
    instance_id: str = "auto"
    provider: str = ""
    token: str = field(default="", repr=False)
    ca_pem: str = ""
    worker_command: tuple[str, ...] = ("/usr/sbin/xce-worker", "--foreground")
    worker_user: str = ""
    decommission_exit_codes: tuple[int, ...] = (100,)
    cloud_provider: str = "auto"  # whose notices the agent watches; none: no cloud section
    plain_http: bool = False  # http:// beyond loopback: tokens in the clear, said so
    join_deadline: str = ""  # like 15m; "" for none (instance.join_deadline)
    on_join_timeout: str | tuple[str, ...] = "poweroff"  # poweroff, none or a command


def agent_config(data: UserData) -> dict[str, object]:
    urls = data.controller_url.split(",")  # a comma-separated list: the replicas, in order
    controller: dict[str, object] = {"url": urls[0] if len(urls) == 1 else urls}
    if data.ca_pem:
        controller["ca_file"] = CA_PATH
    if data.token:
        controller["token_file"] = TOKEN_PATH
    if data.plain_http:
        controller["plain_http"] = True
    instance: dict[str, object] = {"id": data.instance_id, "template": data.template}
    if data.provider:
        instance["provider"] = data.provider
    if data.join_deadline:
        instance["join_deadline"] = data.join_deadline
        action = data.on_join_timeout
        instance["on_join_timeout"] = action if isinstance(action, str) else list(action)
    roles: dict[str, object] = {}
    for role in data.roles:
        if role == "worker":
            worker: dict[str, object] = {
                "command": list(data.worker_command),
                "stop_timeout": "60s",
                "decommission_exit_codes": list(data.decommission_exit_codes),
            }
            if data.worker_user:
                worker["user"] = data.worker_user
            roles[role] = {"components": {"xce-worker": worker}}
        else:
            roles[role] = {"components": {}}
    config: dict[str, object] = {
        "version": 1,
        "controller": controller,
        "instance": instance,
        "roles": roles,
        "state_directory": "/var/lib/xce-agent",
    }
    if data.cloud_provider != "none":
        config["cloud"] = {"provider": data.cloud_provider}
    return config


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so the written files read as they will be."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(data: UserData) -> str:
    files: list[dict[str, object]] = [
        {
            "path": "/etc/xce/agent.yaml",
            "permissions": "0644",
            "owner": "root:root",
            "content": yaml.safe_dump(agent_config(data), sort_keys=False),
        }
    ]
    if data.token:
        files.append(
            {
                "path": "/etc/xce/join-token",
                "permissions": "0600",
                "owner": "root:root",
                "content": data.token + "\n",
            }
        )
    if data.ca_pem:
        files.append(
            {
                "path": "/etc/xce/ca.pem",
                "permissions": "0644",
                "owner": "root:root",
                "content": data.ca_pem,
            }
        )
    doc: dict[str, object] = {}
    if data.worker_user:
        # "default" keeps the image's own user (cloud-init drops it when users: omits it);
        # system: a low uid and no home directory, like a package's service user.
        doc["users"] = ["default", worker_account(data.worker_user)]
    doc["write_files"] = files
    doc["runcmd"] = [["systemctl", "enable", "--now", "xce-agent.service"]]
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)
    return "#cloud-config\n" + body


def worker_account(name: str) -> dict[str, object]:
    """cloud-init's users: entry for the worker's user (left as it is if the image has it)."""
    return {
        "name": name,
        "gecos": "XCE worker",
        "system": True,
        "shell": NOLOGIN,
        "lock_passwd": True,
    }
