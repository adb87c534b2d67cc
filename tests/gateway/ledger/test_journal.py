"""The record journal: a killed gateway loses no finished request, and the streams it was
relaying are recorded as interrupted when it starts again."""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ledger.journal import INTERRUPTED, Journal, recover
from gateway.ledger.spool import RecordQueue
from gateway.ledger.store import Store, record_row
from plumbline_kit.fakes.upstream import running_fake
from tests.gateway.ledger.test_store import full_record
from tests.harness import free_port, wait_for

REPO = Path(__file__).resolve().parents[3]


def _row(request_id: str) -> dict[str, Any]:
    return record_row(full_record(request_id))


def _died(journal: Journal) -> None:
    """What a SIGKILL does to a journal: its lock released, its file left as it was."""
    journal._unmap()


def test_a_dead_processs_journal_gives_its_unsettled_records(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.finish(_row("done"))
    j.begin(_row("streaming"))
    j.begin(_row("began-and-finished"))
    j.finish(_row("began-and-finished"))
    torn = b'{"f":{"request_id":"torn"'  # the crash cut the last line's copy short
    assert j._map is not None
    j._map[j._size : j._size + len(torn)] = torn
    assert list(recover(tmp_path)) == []  # its process is alive: the lock is held
    _died(j)
    [(path, rows)] = list(recover(tmp_path))
    got = {r["request_id"]: r for r in rows}
    assert set(got) == {"done", "streaming", "began-and-finished"}
    assert got["done"]["status"] == 200 and got["done"]["error_class"] is None
    assert got["streaming"]["status"] == 500 and got["streaming"]["error_class"] == INTERRUPTED
    assert got["began-and-finished"]["error_class"] is None
    assert path == j.path


def test_a_rewritten_journal_keeps_only_the_unsettled_records(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_bytes=4096)
    for i in range(40):
        j.finish(_row(f"r{i}"))
    j.begin(_row("open-stream"))
    j.settle(f"r{i}" for i in range(39))
    j.sync()  # past max_bytes: rewritten
    assert len(j.path.read_bytes().split(b"\0", 1)[0]) < 4096
    _died(j)
    [(_, rows)] = list(recover(tmp_path))
    assert sorted(r["request_id"] for r in rows) == ["open-stream", "r39"]


def test_a_journal_grows_past_its_first_reservation(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_bytes=64 << 20)
    first = j.path.stat().st_size
    for i in range(3000):  # about 3 MB of lines
        j.finish(_row(f"r{i}"))
    assert j.path.stat().st_size > first
    _died(j)
    [(_, rows)] = list(recover(tmp_path))
    assert len(rows) == 3000


def test_a_full_disk_costs_the_journal_not_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    j = Journal(tmp_path)
    j.finish(_row("before"))

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    for i in range(3000):  # past the first reservation: the next one fails
        j.finish(_row(f"r{i}"))
    assert j.failed > 0
    assert [r.message for r in caplog.records].count(
        f"record journal {j.path}: [Errno 28] No space left on device; records rely on the queue"
    ) == 1
    assert j.pending == 3001  # still settled by the queue as its rows land
    j.settle(["before", *(f"r{i}" for i in range(3000))])
    j.close()
    assert not j.path.exists()


def test_a_rewrite_with_no_room_keeps_the_journal_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(tmp_path, max_bytes=4096)
    for i in range(10):
        j.finish(_row(f"r{i}"))
    j.settle(f"r{i}" for i in range(9))

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    j.sync()  # past max_bytes, but the new file gets no room: the old one stays
    assert j.failed == 0
    j.begin(_row("after"))  # still within the old reservation
    _died(j)
    [(_, rows)] = list(recover(tmp_path))  # settled ones too (the store ignores them again)
    assert sorted(r["request_id"] for r in rows) == ["after", *(f"r{i}" for i in range(10))]


def test_a_closed_queue_leaves_no_journal(tmp_path: Path) -> None:
    store = Store("sqlite:///records.db", root=tmp_path)
    q = RecordQueue(store, tmp_path / "spool", flush_interval_s=0.01)
    for i in range(20):
        q.submit(full_record(f"c{i}"))
    q.close()
    store.close()
    assert q.journal is not None and q.journal.pending == 0
    assert not list((tmp_path / "spool" / "journal").iterdir())


def test_the_next_start_records_what_a_dead_process_journalled(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    j = Journal(spool / "journal")
    j.finish(_row("finished"))
    j.begin(_row("in-flight"))
    _died(j)
    store = Store("sqlite:///records.db", root=tmp_path)
    q = RecordQueue(store, spool, flush_interval_s=0.01)
    try:
        wait_for(lambda: store.count() == 2, 30)
    finally:
        q.close()
    interrupted = store.get("in-flight")
    assert interrupted is not None and interrupted["error_class"] == INTERRUPTED
    assert q.stats.recovered == 2
    store.close()


# ---- a real gateway, killed mid-traffic ------------------------------------------------------


def _config(folder: Path, upstream: str, port: int) -> Path:
    config = folder / "plumbline.toml"
    config.write_text(
        f"[server]\nport = {port}\nhealth_interval_s = 0\nidle_timeout_s = 60\n\n"
        f'[[upstreams]]\nname = "a"\nkind = "vllm"\nbase_url = "{upstream}"\n'
        'model = "m"\n\n[models.smol]\nupstreams = ["a"]\n'
    )
    return config


def _serve(config: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    argv = [sys.executable, "-c", "from gateway.cli import app; app()", "serve", "--config"]
    argv.append(str(config))
    return subprocess.Popen(
        argv,
        cwd=config.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _up(root: str) -> bool:
    try:
        return httpx.get(f"{root}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Traffic:
    """Clients of a gateway: short answers, whole and streamed, one after another; and long
    streams that are still being relayed when the gateway dies."""

    def __init__(self, root: str, long_streams: int) -> None:
        self.root = root
        self.finished: list[str] = []  # request ids whose whole answer the client got
        self.in_flight: list[str] = []  # long streams whose head and first events came
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._short, args=(i,)) for i in range(2)]
        self.threads += [threading.Thread(target=self._long) for _ in range(long_streams)]
        for t in self.threads:
            t.daemon = True
            t.start()

    def _short(self, k: int) -> None:
        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        with httpx.Client(base_url=self.root, timeout=30) as client:
            i = 0
            while not self.stop.is_set():
                i += 1
                stream = (i + k) % 2 == 1
                try:
                    resp = client.post("/v1/chat/completions", json={**body, "stream": stream})
                except httpx.HTTPError:
                    continue  # the gateway died mid-answer: not a finished request
                complete = resp.status_code == 200 and (
                    not stream or resp.text.rstrip().endswith("data: [DONE]")
                )
                if complete:
                    self.finished.append(resp.headers["x-plumbline-request-id"])

    def _long(self) -> None:
        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        try:
            with httpx.stream(
                "POST",
                f"{self.root}/v1/chat/completions",
                json={**body, "max_tokens": 5000},
                timeout=60,
            ) as resp:
                seen = 0
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        seen += 1
                        if seen == 3:  # its head and first events are here: it is in flight
                            self.in_flight.append(resp.headers["x-plumbline-request-id"])
        except httpx.HTTPError:
            pass  # the gateway died: the stream was cut

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def test_sigkill_loses_no_finished_record_and_marks_streams_in_flight(tmp_path: Path) -> None:
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    with running_fake(pace_tps=100, tokens=5000) as fake:
        config = _config(tmp_path, fake.base_url, port)
        proc = _serve(config)
        try:
            wait_for(lambda: proc.poll() is not None or _up(root), 60)
            traffic = Traffic(root, long_streams=3)
            wait_for(lambda: len(traffic.in_flight) == 3 and len(traffic.finished) >= 20, 60)
            os.kill(proc.pid, signal.SIGKILL)  # mid-traffic: short answers are finishing
            proc.wait(timeout=10)
            traffic.join()
            proc = _serve(config)  # the next start
            wait_for(lambda: proc.poll() is not None or _up(root), 60)
            db = tmp_path / "var" / "plumbline.db"
            ids = set(traffic.finished) | set(traffic.in_flight)
            wait_for(lambda: ids <= _stored(db).keys(), 60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    rows = _stored(db)
    assert all(rows[i] == (200, None) for i in traffic.finished)
    assert all(rows[i] == (500, INTERRUPTED) for i in traffic.in_flight)
    assert len(traffic.finished) >= 20


def _stored(db: Path) -> dict[str, tuple[int, str | None]]:
    try:
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT request_id, status, error_class FROM requests").fetchall()
    except sqlite3.OperationalError:  # not made yet, or locked for a moment
        return {}
    return {r[0]: (r[1], r[2]) for r in rows}
