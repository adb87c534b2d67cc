"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp folder on a free port.

The binaries come from the Debian `postgresql` package (/usr/lib/postgresql/*/bin). initdb
refuses to run as root, so as root the cluster is owned by and run as the `postgres` user.
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
import uuid
from collections.abc import Iterator
from pathlib import Path


def bin_dir() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
        reverse=True,
    )
    if found:
        return Path(found[0]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A throwaway cluster that can be stopped and started again (to take the store away)."""

    def __init__(self) -> None:
        bindir = bin_dir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="plumbline-pg-"))
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.folder / "data", _free_port()
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        argv = [*self.prefix, str(self.bindir / tool), *args]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.folder / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        """`immediate` is a crash: with this fixture's synchronous_commit=off it can lose
        commits already acknowledged; `fast` is a clean stop."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    """A started cluster, removed afterwards."""
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.remove()


@contextlib.contextmanager
def server() -> Iterator[str]:
    """Start a cluster; yields an admin URL (postgresql://postgres@127.0.0.1:PORT/postgres)."""
    with cluster() as c:
        yield c.url


def fresh_database(admin_url: str) -> str:
    """Create an empty database on the server; returns its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin_url.rsplit("/", 1)[0] + f"/{name}"
