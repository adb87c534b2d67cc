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

POSTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
MODEL = "smol"  # the fuzz gateway's one configured model
MB = 1024 * 1024


@dataclass(slots=True)
class Probe:
    name: str
    path: str
    body: bytes | None = None
    method: str = "POST"
    headers: dict[str, Any] = field(default_factory=dict)


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


# ---- the own corpus -------------------------------------------------------------------------


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def valid_body(path: str) -> dict[str, Any]:
    """The smallest valid body for one of the POST routes."""
    if path.endswith("chat/completions"):
        return _chat()
    if path.endswith("/completions"):
        return {"model": MODEL, "prompt": "hi"}
    return {"model": MODEL, "input": "hi"}


def _with_raw_field(path: str, name: str, raw: bytes) -> bytes:
    return json.dumps(valid_body(path)).encode()[:-1] + b', "' + name.encode() + b'": ' + raw + b"}"


def corpus(max_body_bytes: int) -> list[Probe]:
    probes: list[Probe] = []
    raw_bodies = {
        "empty": b"",
        "spaces": b"   \n",
        "open_brace": b"{",
        "truncated": b'{"model": "smol", "mes',
        "trailing_comma": b'{"model": "smol",}',
        "single_quotes": b"{'model': 'smol'}",
        "nan": b'{"model": "smol", "temperature": NaN}',
        "inf": b'{"model":"smol","n":1e999}',
        "null": b"null",
        "array": b"[]",
        "string": b'"hello"',
        "number": b"42",
        "true": b"true",
        "bom": b"\xef\xbb\xbf" + json.dumps(_chat()).encode(),
        "invalid_utf8": b'{"model": "smol", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        "lone_surrogate": b'{"model":"smol","messages":[{"role":"user","content":"\\ud800"}]}',
        "nul_in_string": b'{"model":"smol\\u0000","messages":[{"role":"user","content":"a"}]}',
        "deep_array": _nested(100_000).encode(),
        "deep_object": ('{"a":' * 5000 + "1" + "}" * 5000).encode(),
        "huge_body": b'{"model": "smol", "messages": [{"role": "user", "content": "'
        + b"a" * (max_body_bytes + MB)
        + b'"}]}',
        "just_under_limit": b'{"model": "nope", "pad": "' + b"a" * (max_body_bytes - 100) + b'"}',
        "huge_key_count": json.dumps({f"k{i}": i for i in range(200_000)}).encode(),
    }
    for name, raw in raw_bodies.items():
        for path in POSTS:
            probes.append(Probe(f"{name}@{path}", path, raw))
    for path in POSTS:  # valid requests carrying a deeply nested extra field (relayed as is)
        for depth in (200, 300, 1000):
            probes.append(
                Probe(
                    f"deep_extra_{depth}@{path}",
                    path,
                    _with_raw_field(path, "x", _nested(depth).encode()),
                )
            )
    wrong: dict[str, dict[str, Any]] = {
        "model_int": {"model": 5},
        "model_null": {"model": None},
        "model_list": {"model": ["a"]},
        "model_empty": {"model": ""},
        "model_long": {"model": "m" * 100_000},
        "model_unknown": {"model": "nope"},
        "messages_str": {"messages": "hi"},
        "messages_obj": {"messages": {"role": "user"}},
        "messages_ints": {"messages": [1, 2]},
        "messages_empty": {"messages": []},
        "role_bad": {"messages": [{"role": "god"}]},
        "content_int": {"messages": [{"role": "user", "content": 5}]},
        "stream_str": {"stream": "yes"},
        "n_str": {"n": "2"},
        "n_huge": {"n": 10**6},
        "n_enormous": {"n": 10**30},
        "n_zero": {"n": 0},
        "n_negative": {"n": -1},
        "n_float": {"n": 1.5},
        "max_tokens_negative": {"max_tokens": -1},
        "max_tokens_zero": {"max_tokens": 0},
        "max_tokens_min64": {"max_tokens": -(2**63)},
        "max_tokens_huge": {"max_tokens": 10**40},
        "max_tokens_str": {"max_tokens": "10"},
        "max_completion_negative": {"max_completion_tokens": -5},
        "temperature_huge": {"temperature": 1e308},
        "temperature_str": {"temperature": "hot"},
        "top_p_negative": {"top_p": -0.1},
        "seed_huge": {"seed": 2**200},
        "top_k_huge": {"top_k": 2**70},
        "logprobs_huge": {"logprobs": 10**12},
        "top_logprobs_huge": {"top_logprobs": 10**9},
        "stop_int": {"stop": 5},
        "stop_many": {"stop": ["x"] * 100_000},
        "tools_str": {"tools": "x"},
        "stream_options_list": {"stream_options": [1]},
        "penalty_huge": {"presence_penalty": 1e9},
        "prompt_empty": {"prompt": []},
        "prompt_obj": {"prompt": {"a": 1}},
        "input_empty": {"input": ""},
        "dimensions_negative": {"dimensions": -3},
        "best_of_huge": {"best_of": 10**9},
        "encoding_bad": {"encoding_format": "hex"},
        "extra_huge_int": {"x": 10**400},
        "lane_header": {},
    }
    for name, patch in wrong.items():
        for path in POSTS:
            body = {**valid_body(path), **patch}
            try:
                raw = json.dumps(body).encode()
            except ValueError:
                continue
            probes.append(Probe(f"{name}@{path}", path, raw))
    probes += [
        Probe("get_on_post", "/v1/chat/completions", None, "GET"),
        Probe("put", "/v1/chat/completions", b"{}", "PUT"),
        Probe("unknown_path", "/v1/nope", b"{}"),
        Probe("traversal", "/v1/../../etc/passwd", None, "GET"),
        Probe("query_garbage", "/v1/models?x=%ff%fe&y=" + "z" * 4000, None, "GET"),
        Probe(
            "text_plain",
            "/v1/chat/completions",
            json.dumps(_chat()).encode(),
            headers={"content-type": "text/plain"},
        ),
        Probe(
            "length_not_number",
            "/v1/chat/completions",
            b"{}",
            headers={"x-test-note": "content-length is set by the client"},
        ),
        Probe(
            "session_huge",
            "/v1/chat/completions",
            json.dumps(_chat(stream=True)).encode(),
            headers={"x-session-id": "s" * 7000},
        ),
        Probe(
            "lane_weird",
            "/v1/chat/completions",
            json.dumps(_chat()).encode(),
            headers={"x-plumbline-lane": "evalé".encode()},
        ),
        Probe(
            "auth_garbage",
            "/v1/models",
            None,
            "GET",
            headers={"authorization": b"Bearer " + b"\xff" * 100},
        ),
    ]
    return probes


def raw_requests(port: int) -> list[tuple[str, bytes]]:
    """Requests only a raw socket can send: broken framing, header injection, oversize heads."""
    body = json.dumps(_chat()).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    return [
        (
            "lf_in_header",
            head
            + b"X-Session-Id: a\nInjected: 1\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body,
        ),
        (
            "cr_in_header",
            head
            + b"X-Session-Id: a\rInjected: 1\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body,
        ),
        (
            "nul_in_header",
            head
            + b"X-Session-Id: a\x00b\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body,
        ),
        ("header_no_colon", head + b"NoColonHere\r\n\r\n"),
        ("length_negative", head + b"Content-Length: -5\r\n\r\n" + body),
        ("length_garbage", head + b"Content-Length: abc\r\n\r\n" + body),
        ("length_twice", head + b"Content-Length: 3\r\nContent-Length: 5\r\n\r\n" + body),
        (
            "length_and_chunked",
            head + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0\r\n\r\n",
        ),
        ("bad_chunk_size", head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
        (
            "chunked_huge",
            head
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"100000\r\n" + b"a" * 0x100000 + b"\r\n" for _ in range(10))
            + b"0\r\n\r\n",
        ),
        ("header_64k", head + b"X-Big: " + b"a" * 65_536 + b"\r\n\r\n"),
        ("header_1m", head + b"X-Big: " + b"a" * MB + b"\r\n\r\n"),
        ("headers_10k", head + b"".join(b"X-H%d: v\r\n" % i for i in range(10_000)) + b"\r\n"),
        ("request_line_garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64),
        ("method_garbage", b"P\xffST / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("http_0_9", b"GET /health\r\n\r\n"),
        ("version_garbage", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n"),
        ("uri_huge", b"GET /" + b"a" * MB + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    ]


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
    from gateway.fakes.upstream import running_fake
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
