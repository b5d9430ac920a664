"""Throw-away PostgreSQL servers for tests, from the distribution's own binaries.

`initdb` refuses to run as root, so as root the server runs as the `postgres` user
(`runuser -u postgres --`) in a directory that user owns; it listens on a unix socket only,
in that directory. A standby is a `pg_basebackup -R -X stream` of a primary, promoted with
`pg_ctl promote`. Tests that need one skip with the reason when the binaries are missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest


def pg_bin() -> Path | None:
    """The newest installed server's binaries (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _major(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


def why_not() -> str:
    """Why no server can be started here ("" when one can)."""
    if pg_bin() is None:
        return "PostgreSQL server binaries not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the server as postgres"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]' psycopg-pool)"
    return ""


class PgServer:
    """One server: `dsn(db)` connects to database `db` over its unix socket."""

    def __init__(self, root: Path, name: str = "primary", port: int = 5432) -> None:
        bin_dir = pg_bin()
        assert bin_dir is not None
        self.bin = bin_dir
        self.root = root
        self.data = root / name
        self.socket = root  # short: a unix socket path must fit in 107 bytes
        self.port = port
        self.proc_pid = 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def init(self) -> PgServer:
        self._run("initdb", "--no-sync", "-A", "trust", "-U", "postgres", "-D", str(self.data))
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                "fsync = off\nsynchronous_commit = on\nfull_page_writes = off\n"
                "wal_level = replica\nmax_wal_senders = 4\nmax_connections = 200\n"
                "listen_addresses = ''\n"
            )
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("local replication all trust\n")
        return self

    def start(self) -> PgServer:
        opts = f"-k {self.socket} -p {self.port}"
        log = self.root / f"{self.data.name}.log"
        self._run("pg_ctl", "-w", "-t", "60", "-D", str(self.data), "-l", str(log), "-o", opts,
                  "start")  # fmt: skip
        self.proc_pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def dsn(self, db: str = "postgres") -> str:
        return f"host={self.socket} port={self.port} user=postgres dbname={db}"

    def sql(self, statement: str, db: str = "postgres") -> str:
        import psycopg

        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            cur = conn.execute(statement)
            return str(cur.fetchone()[0]) if cur.description else ""  # type: ignore[index]

    def standby(self, name: str, port: int) -> PgServer:
        """A streaming standby of this server, started."""
        other = PgServer(self.root, name, port)
        where = ["-h", str(self.socket), "-p", str(self.port), "-U", "postgres"]
        self._run(
            "pg_basebackup", *where, "-D", str(other.data), "-R", "-X", "stream", "-c", "fast"
        )
        return other.start()

    def promote(self) -> None:
        done = self._run("pg_ctl", "-w", "-D", str(self.data), "promote", check=False)
        if done.returncode:
            log = self.root / f"{self.data.name}.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"promote failed: {done.stdout}{done.stderr}\n{tail}")

    def processes(self) -> list[psutil.Process]:
        """The postmaster and every process it started (backends, walsender, checkpointer):
        what a frozen machine stops."""
        postmaster = psutil.Process(self.proc_pid)
        return [postmaster, *postmaster.children(recursive=True)]

    def kill(self) -> None:
        """kill -9 of the postmaster (its backends exit when they see it gone)."""
        if self.proc_pid:
            os.kill(self.proc_pid, signal.SIGKILL)
            self.proc_pid = 0

    def stop(self) -> None:
        if self.proc_pid:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
            self.proc_pid = 0


def make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="xcepg"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    return root


class PgCluster:
    """A primary (and standbys on demand) for one test session or one test."""

    def __init__(self, port: int = 5432) -> None:
        self.root = make_root()
        self.primary = PgServer(self.root, "primary", port).init().start()
        self.databases = 0
        self.servers = [self.primary]

    def database(self) -> str:
        """A new empty store on the primary; its connection string. A schema of its own in
        one shared database: far quicker to make than a database, as separate for a store."""
        if not self.databases:
            self.primary.sql("CREATE DATABASE xcetests")
        self.databases += 1
        schema = f"t{self.databases}"
        self.primary.sql(f"CREATE SCHEMA {schema}", db="xcetests")
        return f"{self.primary.dsn('xcetests')} options=-csearch_path={schema}"

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def need_pg() -> None:
    reason = why_not()
    if reason:
        pytest.skip(reason)
