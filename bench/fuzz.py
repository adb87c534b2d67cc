"""Bad input against the gateway: schemathesis cases generated from its OpenAPI schema (valid and
invalid bodies) plus an own corpus (invalid JSON, wrong types, huge numbers, 10 MB bodies,
invalid UTF-8, deep nesting, enormous `n`, negative `max_tokens`, protocol-level garbage and
header injection sent over a raw socket).

Every reply must be below 500, and every 4xx must be an OpenAI error envelope whose message says
what was wrong. Replies to garbage that never becomes an HTTP request (the HTTP server's own
plain-text 400) are counted apart as `protocol_rejections`; a connection that closes or times out
without any reply counts as a crash.

    python bench/fuzz.py                         # >= 10,000 cases, counts to var/fuzz.json
    python bench/fuzz.py --cases 500 --out -     # quick run, counts to stdout

It starts the fake upstream and the gateway itself, on loopback. `tests/gateway/test_fuzz.py`
runs the same code with a reduced count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fuzz_corpus import MB, MODEL, Probe, corpus, raw_requests  # noqa: E402


@dataclass
class Counts:
    cases: int = 0
    schema_cases: int = 0
    corpus_cases: int = 0
    raw_cases: int = 0
    server_errors: int = 0
    crashes: int = 0
    bad_envelopes: int = 0
    protocol_rejections: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, origin: str, status: int | None, problem: str | None) -> None:
        self.cases += 1
        self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1
        if problem is None:
            return
        if status is None:
            self.crashes += 1
        elif status >= 500:
            self.server_errors += 1
        else:
            self.bad_envelopes += 1
        if len(self.problems) < 50:
            self.problems.append(f"{origin}: {problem}")

    @property
    def failures(self) -> int:
        return self.server_errors + self.crashes + self.bad_envelopes


def problem_with(status: int, body: bytes) -> str | None:
    """What is wrong with a reply (None: fine)."""
    if status >= 500:
        return f"status {status}: {body[:200]!r}"
    if status < 400:
        return None
    try:
        error = json.loads(body)["error"]
        message, kind = error["message"], error["type"]
    except (ValueError, KeyError, TypeError):
        return f"status {status} without an OpenAI error envelope: {body[:200]!r}"
    if not isinstance(message, str) or len(message) < 10 or not isinstance(kind, str):
        return f"status {status} with an unhelpful message: {body[:200]!r}"
    return None


def send_raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int | None, bytes]:
    """Send bytes, read the reply until the server closes; (status or None, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        with contextlib.suppress(OSError):  # the server may close before reading it all
            s.sendall(data)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
    reply = b"".join(chunks)
    if not reply.startswith(b"HTTP/1."):
        return None, reply
    status = int(reply.split(b" ", 2)[1])
    return status, reply.partition(b"\r\n\r\n")[2]


def _send_probe(client: httpx.Client, root: str, probe: Probe, counts: Counts) -> httpx.Client:
    """One corpus probe, counted; the client to go on with (a fresh one if the server closed
    the kept-alive connection, after a 500: the probe is sent once more on it)."""
    for fresh in (False, True):
        if fresh:
            client.close()
            client = httpx.Client(base_url=root, timeout=30)
        try:
            resp = client.request(
                probe.method, probe.path, content=probe.body, headers=probe.headers
            )
        except (httpx.ReadError, httpx.RemoteProtocolError) as e:
            if fresh:
                counts.add(probe.name, None, f"no reply ({type(e).__name__})")
            continue
        except httpx.HTTPError as e:
            counts.add(probe.name, None, f"no reply ({type(e).__name__})")
        else:
            counts.add(probe.name, resp.status_code, problem_with(resp.status_code, resp.content))
        break
    return client


def _send_raw_case(port: int, name: str, data: bytes, counts: Counts) -> None:
    """One raw HTTP request, counted; the HTTP server's own plain-text 400 is a protocol
    rejection, not a problem."""
    try:
        status, body = send_raw(port, data)
    except OSError as e:
        status, body = None, str(e).encode()
    if status is None:
        counts.add(name, None, f"no HTTP reply: {body[:80]!r}")
    elif status == 400 and not body.lstrip().startswith(b"{"):
        counts.add(name, status, None)
        counts.protocol_rejections += 1
    else:
        counts.add(name, status, problem_with(status, body))
    counts.raw_cases += 1


def run_corpus(
    root: str,
    port: int,
    counts: Counts,
    max_body_bytes: int,
    only: Callable[[str], bool] = lambda name: True,
) -> None:
    client = httpx.Client(base_url=root, timeout=30)
    for probe in corpus(max_body_bytes):
        if only(probe.name):
            client = _send_probe(client, root, probe, counts)
            counts.corpus_cases += 1
    client.close()
    for name, data in raw_requests(port):
        if only(name):
            _send_raw_case(port, name, data, counts)


# ---- schemathesis -----------------------------------------------------------------------------


def run_schema(root: str, cases: int, counts: Counts, seed: int = 0) -> None:
    """`cases` generated requests, spread over the schema's operations and both generation modes
    (valid bodies, half of them aimed at the configured model; and schema-violating bodies)."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(root + "/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]  # type: ignore[union-attr]
    posts = [op for op in operations if op.method.upper() == "POST"]
    others = [op for op in operations if op.method.upper() != "POST"]
    plan = [(op, mode) for op in posts for mode in GenerationMode] + [
        (op, GenerationMode.POSITIVE) for op in others
    ]
    weights = [(1.0 if op.method.upper() == "POST" else 0.05) for op, _ in plan]
    session = requests.Session()

    def call(case: Any, positive: bool) -> None:
        body = case.body
        if positive and isinstance(body, dict) and hash(json.dumps(body, default=str)) % 2:
            body["model"] = MODEL  # half the valid bodies reach the upstream
        label = f"schema {case.method} {case.path} {'positive' if positive else 'negative'}"
        try:
            resp = case.call(base_url=root, session=session, timeout=30)
        except requests.RequestException as e:
            counts.add(label, None, f"no reply ({type(e).__name__})")
        else:
            problem = problem_with(resp.status_code, resp.content)
            if problem is not None:
                problem += f" for body {json.dumps(body, default=str)[:300]}"
            counts.add(label, resp.status_code, problem)
        counts.schema_cases += 1

    def runner(op: Any, mode: Any, budget: int) -> Callable[[], None]:
        @hypothesis_seed(seed)
        @settings(
            max_examples=budget,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(op.as_strategy(generation_mode=mode))
        def one(case: Any) -> None:
            call(case, mode == GenerationMode.POSITIVE)

        return one  # type: ignore[no-any-return]

    for (op, mode), weight in zip(plan, weights, strict=True):
        # Some operation/mode pairs have (almost) nothing to generate: skip them, not the run.
        with contextlib.suppress(Unsatisfiable):
            runner(op, mode, max(1, round(cases * weight / sum(weights))))()
    session.close()


# ---- running it -------------------------------------------------------------------------------


@contextlib.contextmanager
def fuzz_target(max_body_bytes: int = 8 * MB) -> Iterator[tuple[str, int]]:
    """The fake upstream and a gateway with one model, both on loopback; yields (root, port)."""

    from gateway.edge.app import create_app
    from plumbline_kit.fakes.upstream import running_fake
    from tests.harness import config_from, serving_server

    with running_fake(tokens=4, record=False) as fake:
        config = config_from(
            {
                "server": {
                    "health_interval_s": 0,
                    "retry_backoff_s": 0,
                    "max_body_bytes": max_body_bytes,
                },
                "upstreams": [
                    {"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "fake-model"}
                ],
                "models": {MODEL: {"upstreams": ["a"]}},
            }
        )
        app = create_app(config, record=False)  # the factory wires the access guard
        with serving_server(app, log_level="critical") as (root, server):
            yield root, server.config.port


def fuzz(
    cases: int,
    seed: int = 0,
    only: Callable[[str], bool] = lambda name: True,
    progress: Callable[[str], None] = lambda s: None,
) -> Counts:
    counts = Counts()
    started = time.monotonic()
    with fuzz_target() as (root, port):
        run_corpus(root, port, counts, 8 * MB, only)
        progress(f"corpus: {counts.cases} cases, {counts.failures} failures")
        for attempt in range(5):  # hypothesis stops early on small spaces: top up, new seed
            missing = cases - counts.cases
            if missing <= 0:
                break
            run_schema(root, missing, counts, seed + attempt)
            progress(f"schema: {counts.schema_cases} cases, {counts.failures} failures")
    counts.seconds = round(time.monotonic() - started, 1)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000, help="total cases (default 10,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        default=str(ROOT / "var" / "fuzz.json"),
        help="where the counts go ('-' for stdout)",
    )
    args = parser.parse_args(argv)
    counts = fuzz(args.cases, args.seed, progress=lambda s: print(s, file=sys.stderr))
    text = json.dumps(
        {"command": "python bench/fuzz.py " + " ".join(argv or sys.argv[1:]), **asdict(counts)},
        indent=2,
    )
    if args.out == "-":
        print(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        print(
            f"{counts.cases} cases, {counts.server_errors} 5xx, {counts.crashes} crashes, "
            f"{counts.bad_envelopes} bad envelopes -> {args.out}",
            file=sys.stderr,
        )
    return 1 if counts.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
