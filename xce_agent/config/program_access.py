"""Whether a component's `user:` may run its program: every directory on the way searchable
by that user, and the file a regular file it may execute (and read, for a #! script).

The kernel decides at exec time; this reads the same rule ahead of time (file modes, POSIX
access ACLs, noexec mounts), so a program its user cannot run is a config error at
`validate` instead of a restart loop. Directories are checked both as the path is written
and as its symbolic links resolve. Where the checking process cannot look (not root, and a
directory it cannot search itself), the answer is "cannot tell", never a guess.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import struct
from dataclasses import dataclass
from enum import Enum

_ACL_XATTR = "system.posix_acl_access"
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = (
    0x01,
    0x02,
    0x04,
    0x08,
    0x10,
    0x20,
)
_EXECUTE, _READ = 1, 4  # bits of a mode triplet or of an ACL entry's permissions
_BITS = {"search": _EXECUTE, "execute": _EXECUTE, "read": _READ}


@dataclass(frozen=True)
class Account:
    """Who the program will run as: the user and every group the runner gives it."""

    name: str
    uid: int
    gids: frozenset[int]

    def describe(self) -> str:
        return f"user {self.name!r} (uid {self.uid})"


def account(user: str, group: str | None) -> Account | None:
    """The account a component with `user:` (and `group:`) runs as; None for root or unknown."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        gid = entry.pw_gid
        if group is not None:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except (KeyError, OverflowError, ValueError):
        return None  # reported by the user and group checks
    if entry.pw_uid == 0:
        return None  # root needs one x bit anywhere: the PATH check as root already says so
    # The same groups the runner sets (supervision.process.credentials).
    return Account(entry.pw_name, entry.pw_uid, frozenset(os.getgrouplist(entry.pw_name, gid)))


class Verdict(str, Enum):
    OK = "ok"
    MISSING = "missing"
    DENIED = "denied"
    UNKNOWN = "unknown"  # the checking process may not look


@dataclass(frozen=True)
class Finding:
    verdict: Verdict
    path: str
    why: str = ""


def find_program(word: str, search: str, who: Account) -> Finding:
    """What `who` gets when it execs `word` the way the runner does (PATH tried in order)."""
    if "/" in word:
        candidates = [word]
    else:
        candidates = [os.path.join(d, word) for d in search.split(os.pathsep) if d]
    findings = [may_run(path, who) for path in candidates]
    for verdict in (Verdict.OK, Verdict.DENIED, Verdict.UNKNOWN):
        for found in findings:
            if found.verdict is verdict:
                return found  # the first that runs; else why the first one found does not
    return Finding(Verdict.MISSING, word)


def may_run(path: str, who: Account) -> Finding:
    absolute = os.path.abspath(path)
    try:
        os.stat(absolute)
    except FileNotFoundError:
        return Finding(Verdict.MISSING, absolute)
    except NotADirectoryError:
        return Finding(Verdict.MISSING, absolute)
    except PermissionError:
        return _cannot_tell(absolute, absolute, who)
    real = os.path.realpath(absolute)
    for directory in _ancestors(absolute) + _ancestors(real):
        found = _allows(directory, who, "search")
        if found is not None:
            return Finding(found.verdict, absolute, found.why)
    try:
        info = os.stat(real)
    except OSError:
        return _cannot_tell(absolute, real, who)
    if not stat.S_ISREG(info.st_mode):
        return Finding(Verdict.DENIED, absolute, f"{real} is not a regular file")
    found = _allows(real, who, "execute")
    if found is None and _script(real):
        found = _allows(real, who, "read")  # its interpreter opens it as the user
    if found is not None:
        return Finding(found.verdict, absolute, found.why)
    return Finding(Verdict.OK, absolute)


def _script(path: str) -> bool:
    """The file starts with #!: the kernel runs its interpreter, which must read it."""
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False  # unreadable to this check too: the execute check spoke for it


def _ancestors(path: str) -> list[str]:
    """The directories a lookup of `path` searches, from / down."""
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _allows(path: str, who: Account, what: str) -> Finding | None:
    """None if `who` may `what` (search or execute) `path`; else a DENIED or UNKNOWN finding."""
    try:
        info = os.stat(path)
        acl = _acl(path)
        noexec = bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except PermissionError:
        return _cannot_tell(path, path, who)
    except OSError as exc:
        return Finding(Verdict.DENIED, path, f"{path}: {exc.strerror}")
    if what == "execute" and noexec:
        return Finding(Verdict.DENIED, path, f"{path} is on a file system mounted noexec")
    if _granted(info, acl, who, _BITS[what]):
        return None
    shown = f"{stat.filemode(info.st_mode)} {_owner(info)}" + (", with an ACL" if acl else "")
    return Finding(Verdict.DENIED, path, f"{who.describe()} cannot {what} {path} ({shown})")


def _granted(info: os.stat_result, acl: list[tuple[int, int, int]], who: Account, bit: int) -> bool:
    mode = info.st_mode
    if not acl:
        if info.st_uid == who.uid:
            return bool(mode >> 6 & bit)
        if info.st_gid in who.gids:
            return bool(mode >> 3 & bit)
        return bool(mode & bit)
    # POSIX.1e access check: owner, named user, groups (any matching entry), other.
    mask = next((perm for tag, perm, _ in acl if tag == _ACL_MASK), 7)
    if info.st_uid == who.uid:
        return any(tag == _ACL_USER_OBJ and perm & bit for tag, perm, _ in acl)
    named = [perm for tag, perm, ident in acl if tag == _ACL_USER and ident == who.uid]
    if named:
        return bool(named[0] & mask & bit)
    groups = [
        perm
        for tag, perm, ident in acl
        if (tag == _ACL_GROUP_OBJ and info.st_gid in who.gids)
        or (tag == _ACL_GROUP and ident in who.gids)
    ]
    if groups:
        return any(perm & mask & bit for perm in groups)
    return any(tag == _ACL_OTHER and perm & bit for tag, perm, _ in acl)


def _acl(path: str) -> list[tuple[int, int, int]]:
    """The access ACL's entries (tag, permissions, id); [] for none (the mode alone rules)."""
    try:
        raw = os.getxattr(path, _ACL_XATTR)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise
    body = raw[4:]  # after the version word
    return [struct.unpack_from("<HHI", body, i) for i in range(0, len(body) - 7, 8)]


def _owner(info: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{user}:{group}"


def _cannot_tell(program: str, where: str, who: Account) -> Finding:
    me = os.geteuid()
    if me == who.uid and set(os.getgroups()) | {os.getegid()} == who.gids:
        # The check runs as the very account: what it may not see, the program may not either.
        return Finding(Verdict.DENIED, program, f"{who.describe()} cannot look at {where}")
    return Finding(
        Verdict.UNKNOWN,
        program,
        f"cannot tell whether {who.describe()} may run it: this check runs as uid {me}, "
        f"which may not look at {where} (check as root)",
    )
