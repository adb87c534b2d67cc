"""`plumbline serve --workers 2` as a user runs it: one port, two gateway processes, every
answer right, every record in the one SQLite store, /metrics summing both workers (and still
counting a worker that died), SIGTERM ending it all with status 0 and nothing left behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client import multiprocess
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gateway import cli
from gateway.config import parse_config
from gateway.errors import ConfigError
from plumbline_kit.fakes.upstream import running_fake
from tests.harness import free_port, wait_for

ANSWER = "the fake says hello"
PLUMBLINE = Path(sys.executable).parent / "plumbline"


def _config(folder: Path, upstream: str, port: int) -> Path:
    config = folder / "plumbline.toml"
    config.write_text(
        f"[server]\nport = {port}\nhealth_interval_s = 0\n\n"
        f'[[upstreams]]\nname = "a"\nkind = "vllm"\nbase_url = "{upstream}"\n'
        'model = "fake-model"\n\n[models.smol]\nupstreams = ["a"]\n'
    )
    return config


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _ask(client: openai.OpenAI, i: int) -> tuple[str, str | None, str]:
    """Question `i`, streamed when `i` is odd: the answer's text, its finish reason and the
    gateway's id of the request (the id its record has)."""
    messages = [{"role": "user", "content": f"question {i}"}]
    chat = client.chat.completions.with_raw_response
    if i % 2:
        raw = chat.create(model="smol", messages=messages, stream=True)  # type: ignore[arg-type]
        text, finish = "", None
        for chunk in raw.parse():
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
    else:
        raw = chat.create(model="smol", messages=messages)  # type: ignore[arg-type]
        reply = raw.parse()
        text, finish = reply.choices[0].message.content or "", reply.choices[0].finish_reason
    return text, finish, raw.headers["x-plumbline-request-id"]


def _served_by_worker(folder: Path) -> dict[int, float]:
    """Requests each worker counted, from its own file in prometheus-client's folder."""
    counts: dict[int, float] = {}
    for path in folder.glob("counter_*.db"):
        pid = int(path.stem.split("_")[1])
        metrics = multiprocess.MultiProcessCollector.merge([str(path)], accumulate=False)
        counts[pid] = sum(
            s.value
            for m in metrics
            if m.name == "gateway_requests"
            for s in m.samples
            if s.name == "gateway_requests_total"
        )
    return counts


def _workers(parent: int) -> set[int]:
    """The worker processes `plumbline serve` runs now (multiprocessing's spawned children)."""
    found = set()
    for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in cmdline:
            found.add(int(child))
    return found


def _environ(pid: int) -> str:
    """A process's environment, or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _stored(folder: Path) -> int:
    with sqlite3.connect(folder / "var" / "plumbline.db") as db:
        (count,) = db.execute("SELECT count(*) FROM requests").fetchone()
    return int(count)


def _requests_total(root: str) -> float:
    text = httpx.get(f"{root}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gateway_requests_total"
    )


def _serve_two(config: Path, scratch: Path, output: int) -> subprocess.Popen[bytes]:
    """`plumbline serve --workers 2` on `config`, in its folder, its private metrics folder made
    in `scratch`, in a process group of its own (a failed test kills the workers too)."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["TMPDIR"] = str(scratch)
    argv = [str(PLUMBLINE), "serve", "--config", str(config), "--workers", "2"]
    return subprocess.Popen(
        argv,
        cwd=config.parent,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_two_workers_serve_one_port_record_everything_and_stop_cleanly(tmp_path: Path) -> None:
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with running_fake(text=ANSWER) as fake:
        config = _config(tmp_path, fake.base_url, port)
        proc = _serve_two(config, scratch, subprocess.PIPE)
        try:
            wait_for(lambda: proc.poll() is not None or _healthy(f"{root}/health"), 60)
            assert proc.poll() is None
            (folder,) = scratch.glob("plumbline-metrics-*")
            client = openai.OpenAI(base_url=f"{root}/v1", api_key="none", max_retries=0)
            asked, ids = 0, set()
            with ThreadPoolExecutor(10) as pool:
                # 20 at once; a few more until both workers have answered some (the kernel
                # hands each connection to whichever worker accepts first).
                while asked < 20 or len([n for n in _served_by_worker(folder).values() if n]) < 2:
                    assert asked < 200, _served_by_worker(folder)
                    batch = range(asked, asked + (20 if asked == 0 else 4))
                    answers = list(pool.map(lambda i: _ask(client, i), batch))
                    assert [a[:2] for a in answers] == [(ANSWER, "stop")] * len(batch)
                    ids |= {a[2] for a in answers}
                    asked += len(batch)
            # A request is counted once its answer has gone out: the count settles just after.
            wait_for(lambda: sum(_served_by_worker(folder).values()) == asked, 10)
            served = _served_by_worker(folder)
            assert len(served) == 2
            assert _requests_total(root) == asked

            # Both workers write to the one SQLite file at once (WAL, a busy timeout): nothing lost.
            wait_for(lambda: _stored(tmp_path) == asked, 30)

            # A worker that dies is replaced; what it counted still counts, its live gauges go.
            assert _workers(proc.pid) == set(served)
            dead = min(served)
            assert list(folder.glob(f"gauge_livesum_{dead}.db"))
            os.kill(dead, signal.SIGKILL)
            wait_for(lambda: not list(folder.glob(f"gauge_live*_{dead}.db")), 30)
            wait_for(lambda: len(_workers(proc.pid) - {dead}) == 2, 30)
            wait_for(lambda: _healthy(f"{root}/health"), 30)
            assert _requests_total(root) == asked
            workers = _workers(proc.pid)

            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # the test failed: kill its workers too (its group)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    said = out.decode()
    assert proc.returncode == 0, said
    assert "Traceback" not in said, said
    left = [pid for pid in workers if str(config) in _environ(pid)]
    for pid in left:  # do not leave them serving
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived plumbline serve"
    assert not folder.exists()
    with sqlite3.connect(tmp_path / "var" / "plumbline.db") as db:
        rows = db.execute("SELECT request_id, stream, status FROM requests").fetchall()
    assert len(ids) == asked == len(rows)
    assert {r[0] for r in rows} == ids
    assert sorted(r[1:] for r in rows) == sorted((i % 2, 200) for i in range(asked))


def _plumbline(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def _budget_config(folder: Path, store: str) -> Path:
    """A config with a key that has a budget, and `store` as its [store] table."""
    config = folder / "plumbline.toml"
    config.write_text(
        f"[server]\nworkers = 2\n\n[store]\n{store}\n\n"
        '[[access.keys]]\nid = "team"\nsha256 = "' + "0" * 64 + '"\nrequests_per_window = 10\n\n'
        '[[upstreams]]\nname = "a"\nkind = "vllm"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m"\n\n[models.smol]\nupstreams = ["a"]\n'
    )
    return config


def test_server_workers_is_one_by_default_and_at_least_one() -> None:
    base = {"upstreams": [], "models": {}}
    assert parse_config(base).server.workers == 1
    assert parse_config({**base, "server": {"workers": 4}}).server.workers == 4
    with pytest.raises(ConfigError, match=r"server\.workers"):
        parse_config({**base, "server": {"workers": 0}})


def test_workers_without_a_shared_store_are_refused_where_a_limit_would_split(
    tmp_path: Path,
) -> None:
    """Each worker would count the key's budget on its own (twice the limit with two)."""
    code, said = _plumbline("serve", "--config", str(_budget_config(tmp_path, "enabled = false")))
    assert code == 2
    assert "cannot serve with 2 workers" in said and "key 'team'" in said, said
    config = _budget_config(tmp_path, 'url = "sqlite:///:memory:"')
    code, said = _plumbline("serve", "--config", str(config))
    assert code == 2 and "in memory" in said, said
    code, said = _plumbline("serve", "--config", str(config), "--workers", "0")
    assert code == 2 and "--workers" in said, said


def test_up_refuses_several_workers(tmp_path: Path) -> None:
    """`plumbline up` is one process that supervises the replicas it starts."""
    config = _budget_config(tmp_path, "enabled = true")
    code, said = _plumbline("up", "--config", str(config))
    assert code == 2 and "plumbline up serves one gateway process" in said, said


def test_workers_end_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    """SIGKILL, unlike SIGTERM, leaves uvicorn's supervisor no chance to stop its workers: each
    worker asked the kernel for a SIGTERM when its parent dies, so none is left serving."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    with running_fake(text=ANSWER) as fake:
        config = _config(tmp_path, fake.base_url, port)
        proc = _serve_two(config, tmp_path, subprocess.DEVNULL)
        workers: set[int] = set()
        try:
            wait_for(lambda: proc.poll() is not None or _healthy(f"{root}/health"), 60)
            assert proc.poll() is None
            wait_for(lambda: len(_workers(proc.pid)) == 2, 30)
            workers = _workers(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)  # the supervisor alone
            proc.wait(timeout=10)
            wait_for(lambda: not [p for p in workers if str(config) in _environ(p)], 40)
            assert not _healthy(f"{root}/health")  # nothing answers on the port
        finally:
            for pid in workers:
                if str(config) in _environ(pid):
                    os.kill(pid, signal.SIGKILL)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
