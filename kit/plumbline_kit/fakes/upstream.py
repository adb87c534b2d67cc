"""A fast, fault-injecting fake OpenAI-compatible upstream, shaped like vLLM's OpenAI server.

Used by the gateway's tests (retries, fallback, reasoning split, truncation, usage, faults) and
by the benchmarks as "the upstream directly". It runs on aiohttp's low-level server, renders
stream chunks once per (plan, second) and substitutes only the request id, so an unpaced
256-token stream costs one write. What it answers is the behaviours (`behaviour.py`),
the plan of each answer (`plan.py`) and its bodies (`answer.py`); the HTTP server is
`server.py`; this module runs it.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (stream and not),
``POST /v1/responses`` (non-stream), ``POST /v1/embeddings``, ``POST /tokenize`` (vLLM-style
``{"count", "tokens", "max_model_len"}``; with ``messages`` the ids depend on the chat
template's name), ``GET /version``, ``GET /v1/models``, ``GET /health``. ``POST /_fake/engine`` sets
the version and the chat template's name, as an engine upgrade would change them.

Text: the prompt is "tokenized" by whitespace (``/tokenize`` and ``usage.prompt_tokens`` agree).
The answer is ``tok0 tok1 ...`` (one token per stream chunk), or the words of ``text``.
Honoured: ``max_tokens``/``max_completion_tokens`` (they cap reasoning plus answer; a cut gives
``finish_reason: "length"``), ``stop``, ``n``, ``logprobs``/``top_logprobs``, ``tools`` with
``tool_choice``, ``stream_options.include_usage`` (usage only in a last chunk with empty
``choices``). ``seed`` and sampling parameters are only recorded: the output is deterministic.
Any ``model`` is accepted and echoed; ``/v1/models`` lists the configured ``models``.

Behaviour: a JSON object; the effective one for a request is the server defaults, overlaid by
``POST /_fake/default``, overlaid by the next entry of the script (``null`` removes a key). The
keys and what each does: `plumbline_kit/fakes/behaviour.py`.

Control API: ``POST /_fake/script`` (JSON list, appended, consumed FIFO by generation
requests), ``POST /_fake/default`` (object), ``GET /_fake/requests`` (received bodies, headers,
effective behaviour, ignored parameters), ``POST /_fake/reset``. A default ``status`` of 500 or
more also makes ``/health`` and ``/v1/models`` fail (a "down" server).

Harness: ``running_fake(**defaults)`` yields a ``FakeHandle`` (``base_url`` plus the control
calls) for a server in a background thread, or in a subprocess with ``process=True``.
CLI: ``python -m plumbline_kit.fakes.upstream --port N [--tokens N] [--pace-tps X]
[--default JSON]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from plumbline_kit.fakes.behaviour import (
    BEHAVIOUR_KEYS,
    BehaviourError,
    validate_behaviour,
)
from plumbline_kit.fakes.server import FakeUpstream

BACKLOG = 4096


# ---------------------------------------------------------------- running it


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _serve_until(stop: asyncio.Event, sock: socket.socket, **defaults: Any) -> None:
    runner = FakeUpstream(**defaults).runner()
    await runner.setup()
    await web.SockSite(runner, sock, backlog=BACKLOG).start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(host: str = "127.0.0.1", port: int = 8100, **defaults: Any) -> None:
    """Run the fake on ``host:port`` until SIGINT/SIGTERM; ``defaults`` as for FakeUpstream."""
    sock = _listen(host, port)
    loop = _new_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake upstream listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        loop.run_until_complete(_serve_until(stop, sock, **defaults))
    finally:
        loop.close()


@dataclass
class FakeHandle:
    """A running fake: its URLs and blocking calls to its control API."""

    url: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
        with direct.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    def script(self, *behaviours: dict[str, Any]) -> None:
        """Queue behaviours for the next generation requests, one each."""
        self._call("POST", "/_fake/script", list(behaviours))

    def set_default(self, **behaviour: Any) -> None:
        """Replace the default behaviour (over the start-up defaults)."""
        self._call("POST", "/_fake/default", behaviour)

    def set_engine(self, version: str | None = None, chat_template: str | None = None) -> None:
        """Change what ``/version`` and ``/tokenize`` say, as an engine upgrade would
        (``version=""``: ``/version`` answers 404)."""
        change = {"version": version, "chat_template": chat_template}
        self._call("POST", "/_fake/engine", {k: v for k, v in change.items() if v is not None})

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded request: method, path, headers, body, behaviour, ignored_params."""
        return self._call("GET", "/_fake/requests")["requests"]

    def reset(self) -> None:
        """Clear the script and the log; restore the start-up defaults."""
        self._call("POST", "/_fake/reset", {})


@contextlib.contextmanager
def running_fake(
    *, process: bool = False, host: str = "127.0.0.1", **defaults: Any
) -> Iterator[FakeHandle]:
    """Run a fake on a free port, in a thread (default) or a subprocess; stop it on exit."""
    validate_behaviour({k: v for k, v in defaults.items() if k in BEHAVIOUR_KEYS})
    if process:
        with _fake_process(host, defaults) as url:
            yield FakeHandle(url)
        return
    sock = _listen(host, 0)
    loop = _new_loop()
    stop = asyncio.Event()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        task = loop.create_task(_serve_until(stop, sock, **defaults))
        loop.call_soon(started.set)
        loop.run_until_complete(task)

    thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield FakeHandle(f"http://{host}:{sock.getsockname()[1]}")
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def _fake_process(host: str, defaults: dict[str, Any]) -> Iterator[str]:
    opts = {k: defaults.pop(k) for k in ("models", "record") if k in defaults}
    cmd = [
        sys.executable,
        "-m",
        "plumbline_kit.fakes.upstream",
        "--host",
        host,
        "--port",
        "0",
        "--default",
        json.dumps(defaults),
    ]
    cmd += [a for m in opts.get("models", []) for a in ("--model", m)]
    cmd += [] if opts.get("record", True) else ["--no-record"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on " not in line:
            raise RuntimeError(f"fake upstream did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m plumbline_kit.fakes.upstream``: serve a fake upstream on loopback."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--tokens", type=int, help="answer length in tokens")
    ap.add_argument("--pace-tps", type=float, help="per-token pacing of streams")
    ap.add_argument("--model", action="append", help="served model name (repeatable)")
    ap.add_argument("--default", default="{}", help="default behaviour as a JSON object")
    ap.add_argument("--no-record", action="store_true", help="do not keep a request log")
    args = ap.parse_args(argv)
    try:
        defaults = validate_behaviour(json.loads(args.default))
    except (ValueError, BehaviourError) as exc:
        ap.error(f"--default: {exc}")
    if args.tokens is not None:
        defaults["tokens"] = args.tokens
    if args.pace_tps is not None:
        defaults["pace_tps"] = args.pace_tps
    serve(args.host, args.port, models=args.model, record=not args.no_record, **defaults)


if __name__ == "__main__":
    main()
