"""The fuzzer's own corpus (`bench/fuzz.py` sends it): HTTP probes with invalid JSON, wrong
types, huge numbers, 10 MB bodies, invalid UTF-8, deep nesting, enormous `n`, negative
`max_tokens`; and raw requests (protocol-level garbage, oversized heads, header injection) for a
socket."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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
