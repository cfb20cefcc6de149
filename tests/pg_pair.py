"""A throwaway PostgreSQL primary with a synchronous streaming replica, on loopback ports of its own.

Built from the machine's PostgreSQL binaries with initdb / pg_basebackup / pg_ctl, run as the
`postgres` user (PostgreSQL refuses to run as root) in a temporary directory: it never touches the
machine's own cluster. `stop_primary()` stops the primary the hard way (`-m immediate`, as a crash
would) and `promote()` turns the replica into the new primary, as a failover manager (Patroni,
pg_auto_failover, a cloud provider) does.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("no PostgreSQL server binaries (pg_ctl) on this machine")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgPair:
    def __init__(self, owner: str = "postgres") -> None:
        self.bin = _bindir()
        self.owner = owner
        self.root = Path(tempfile.mkdtemp(prefix="gw-failover-"))
        user = pwd.getpwnam(owner)
        os.chown(self.root, user.pw_uid, user.pw_gid)
        self.primary_dir, self.replica_dir = (
            self.root / "primary",
            self.root / "replica",
        )
        self.primary_port, self.replica_port = _free_port(), _free_port()
        self.dbname = "gateway"

    # ------------------------------------------------------------------ running things as the owner

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", self.owner, "--", *command]
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}\n{done.stderr}")
        return done.stdout

    def _ctl(self, data_dir: Path, *args: str) -> str:
        return self._run(
            "pg_ctl",
            "-D",
            str(data_dir),
            "-l",
            str(data_dir.parent / f"{data_dir.name}.log"),
            *args,
        )

    # ------------------------------------------------------------------ the clusters

    def start(self) -> PgPair:
        self._run(
            "initdb",
            "-D",
            str(self.primary_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self._configure(self.primary_dir, self.primary_port)
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\nmax_wal_senders = 5\n")
        with (self.primary_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        self._ctl(self.primary_dir, "-w", "start")
        with self.connect(self.primary_port, "postgres") as conn:
            conn.execute(f"CREATE DATABASE {self.dbname}")
        self._run(
            "pg_basebackup",
            "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres",
            "-D", str(self.replica_dir), "-R", "-X", "stream", "--no-sync", "--checkpoint=fast",
        )  # fmt: skip
        self._configure(self.replica_dir, self.replica_port)
        self._ctl(self.replica_dir, "-w", "start")
        # Synchronous replication: a commit is acknowledged once the replica has it, so a decision the
        # gateway answered survives the primary's loss (docs/operating.md). Set once the replica runs.
        with self.connect(self.primary_port, "postgres") as conn:  # only now: a commit would wait for it
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        self.wait_for_sync_replica()
        return self

    def start_primary_only(self) -> PgPair:
        """Just the primary, durable (fsync on), with room for many connections: bench/soak.py's database."""
        self._run("initdb", "-D", str(self.primary_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._configure(self.primary_dir, self.primary_port, durable=True)
        self._ctl(self.primary_dir, "-w", "start")
        return self

    def _configure(self, data_dir: Path, port: int, durable: bool = False) -> None:
        with (data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                "max_connections = 200\nshared_buffers = 64MB\n"
            )
            if not durable:
                conf.write("fsync = off\nfull_page_writes = off\n")

    def wait_for_sync_replica(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.connect(self.primary_port, "postgres") as conn:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'").fetchone()
            if row and row[0] == "sync":
                return
            time.sleep(0.1)
        raise RuntimeError("the replica did not become a synchronous standby")

    def stop_primary(self) -> None:
        """Stop the primary as a crash would: no shutdown checkpoint, clients cut off."""
        self._ctl(self.primary_dir, "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        self._ctl(self.replica_dir, "-w", "promote")

    def stop(self) -> None:
        for data_dir in (self.primary_dir, self.replica_dir):
            if (data_dir / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    self._ctl(data_dir, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ addresses

    def url(self) -> str:
        """The gateway's DATABASE_URL: both hosts, the writable one wanted (libpq multi-host)."""
        return (
            f"postgres://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.replica_port}/{self.dbname}"
            "?target_session_attrs=read-write"
        )

    def connect(self, port: int, dbname: str | None = None) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="postgres",
            dbname=dbname or self.dbname,
            autocommit=True,
            connect_timeout=5,
        )
