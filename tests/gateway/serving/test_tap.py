"""Shaped events (bytes compared, not parsed) must leave exactly what the event path leaves.

Streams are generated (content with quotes, backslashes, `<think>`, unicode, DEL; logprobs,
chat's and completions', valid, malformed, nested deep, holding the model's key; texts that hold
what follows a text when logprobs do, escaped; tool calls; errors; the token key in other
fields; `"usage": null` on every chunk or not; usage at the end or not), cut into blocks at
random byte offsets, at events' ends or both, and fed to two taps: one allowed shaped events,
one not. The bytes relayed, the error, every field of the record and the sampled answer must be
identical; a fake clock makes the timings equal.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.ledger.record import Record
from gateway.serving import tap as tap_module
from gateway.serving import token_clocks as clocks_module
from gateway.serving.accounting import MalformedStream
from gateway.serving.tap import StreamTap
from gateway.trust.capture import Capture

PIECES = [*'ab "\\\n<>/{}:,é漢\x7f', "@@", "think>", "<think>", "</think>", '"error"', "\\u003c"]
# What follows a text when the choice's logprobs come next (chat's, completions'), inside one.
PIECES += ['"},"logprobs":', '","logprobs":', '\\"},"logprobs":']
TEXT = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join)
PLAIN_TEXT = st.lists(st.sampled_from(PIECES[:17] + PIECES[-3:]), min_size=1, max_size=8).map(
    "".join
)
# What other servers may write inside a JSON string where the text had "@@" (orjson writes none
# of these): other escapes, escaped ASCII that hides a think tag, surrogates (paired and lone),
# and bytes no JSON string may hold (a bad escape, a raw tab, invalid UTF-8).
RAW = [
    b"at",
    b"\\/",
    b"\\u00e9",
    b"\\u0041",
    b"\\u003C",
    b"<think\\u003e",
    b"\\ud83d\\ude00",
    b"\\ud800",
    b"\\x",
    b"\t",
    b"\xff",
    b"\\t",
]
# Logprobs values: as vLLM writes them (chat's, completions'), others, and ones where "%%" is
# replaced by bytes (`BROKEN`) that make the event no JSON, a value with spaces around, or one
# nested deeper than orjson writes it again (after `"usage": null` is removed) or reads it.
NESTED: list[Any] = []
for _ in range(49):
    NESTED = [NESTED]
LOGPROB = st.sampled_from(
    [
        {"content": [{"token": "t", "logprob": -0.5, "bytes": [116], "top_logprobs": []}]},
        {"content": [{"token": '"},"logprobs":', "logprob": -1e-9, "top_logprobs": []}]},
        {"tokens": ["t"], "token_logprobs": [-0.5], "top_logprobs": [{"t": -0.5}]},
        {"text_offset": [3], "finish_reason": None, "model": "m"},
        [],
        {},
        0,
        "@@",
        "%%",
        {"content": "%%"},
        NESTED,
    ]
)
BROKEN = [b'"%%"', b"1,", b"{", b"]", b'{"a":1},"b":{', b"nul", b"1e999", b" 7 ", b"\x00"]
BROKEN += [b"[" * n + b"]" * n for n in (199, 252, 300, 1030)]  # deeper than orjson writes, reads


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    chat = draw(st.booleans())
    usage_null = draw(st.booleans())
    head: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
    }
    if draw(st.booleans()):  # the token key, and its text, in front of the token's own
        head["meta"] = {"content": "c", "text": "t"}
    # Logprobs on some chunks and not others, or on all or none (runs of one shape).
    mixed_logprobs, with_logprobs = draw(st.booleans()), draw(st.booleans())
    # The same value on every chunk or each its own.
    same_logprobs, logprob, vllm_order = draw(st.booleans()), draw(LOGPROB), draw(st.booleans())
    events: list[dict[str, Any]] = []

    def chunk(piece: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        # vLLM's order (the text, its logprobs, the finish reason) or another.
        choice: dict[str, Any] = {"index": 0} if vllm_order else {"index": 0, "finish_reason": 0}
        if chat:
            choice["delta"] = piece
        else:
            choice["text"] = piece.get("content", "")
        if draw(st.booleans()) if mixed_logprobs else with_logprobs:
            choice["logprobs"] = logprob if same_logprobs else draw(LOGPROB)
        else:
            choice["logprobs"] = None
        choice["finish_reason"] = finish
        event = {**head, "choices": [choice]}
        if usage_null:
            event["usage"] = None
        return event

    events.append(chunk({"role": "assistant", "content": ""}))
    plain_only = draw(st.booleans())  # mostly streams the plain-block path can take
    for _ in range(draw(st.integers(1, 40))):
        kinds = ["content"] if plain_only else ["content"] * 8 + ["reasoning", "tool", "empty"]
        kind = draw(st.sampled_from(kinds))
        if kind == "content":
            events.append(chunk({"content": draw(PLAIN_TEXT if plain_only else TEXT)}))
        elif kind == "reasoning":
            events.append(chunk({"reasoning_content": draw(TEXT)}))
        elif kind == "tool":
            call = {"index": 0, "function": {"arguments": draw(TEXT)}}
            events.append(chunk({"tool_calls": [call]}))
        else:
            events.append(chunk({"content": ""}))
    events.append(chunk({}, draw(st.sampled_from(["stop", "length"]))))
    if draw(st.booleans()):
        events.append(
            {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}
        )
    raw = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    while b"@@" in raw:
        raw = raw.replace(b"@@", draw(st.sampled_from(RAW)), 1)
    while b'"%%"' in raw:
        raw = raw.replace(b'"%%"', draw(st.sampled_from(BROKEN)), 1)
    if draw(st.booleans()):
        raw += b": keep-alive\n\n"
    raw += b"data: [DONE]\n\n"
    if draw(st.integers(0, 9)) == 0:  # an event that breaks off
        at = draw(st.integers(10, len(raw) - 20))
        raw = raw[:at] + b"\n\n" + raw[at:]
    # Cut at random bytes, or where events end (one event a block, as a paced stream's arrive,
    # which `feed` takes first), or both.
    ends = [i + 2 for i in range(len(raw) - 2) if raw[i : i + 2] == b"\n\n"]
    cut_at = draw(st.sampled_from(["bytes", "events", "both"]))
    cuts = set() if cut_at == "events" else draw(st.sets(st.integers(1, len(raw) - 1), max_size=12))
    if cut_at != "bytes":
        cuts |= set(ends if cut_at == "events" else draw(st.sets(st.sampled_from(ends))))
    cuts.discard(len(raw))
    blocks = [raw[a:b] for a, b in itertools.pairwise([0, *sorted(cuts), len(raw)])]
    return blocks, chat


def _run(
    blocks: list[bytes],
    chat: bool,
    wants_usage: bool,
    fast: bool,
    keep: int | None = None,
    model: str | None = None,
) -> tuple[Any, ...]:
    clock = itertools.count()
    real = tap_module.time
    fake = SimpleNamespace(perf_counter=lambda: float(next(clock)))
    tap_module.time = clocks_module.time = fake  # type: ignore[assignment]
    try:
        record = Record(request_id="r", door="chat", model="m", stream=True)
        record.t0 = 0.0
        # `keep`: the answer is sampled, up to that many characters.
        capture = None if keep is None else Capture(record, None, True, keep)
        tap = StreamTap(
            record,
            client_wants_usage=wants_usage,
            split_think=False,
            chat=chat,
            capture=capture,
            model=model,
            prompt_tokens=lambda: 11,
        )
        tap.fast = fast
        out: list[bytes] = []
        error = None
        try:
            for block in blocks:
                out.append(tap.feed(block))
            out.append(tap.finish())
        except MalformedStream as e:
            error = str(e)
            out.append(e.partial + tap.abort())
    finally:
        tap_module.time = clocks_module.time = real
    fields = asdict(record)
    del fields["time"]  # the wall clock at creation
    answer = None if capture is None else (capture.answer, capture.reasoning, capture.tool_calls())
    return b"".join(out), error, fields, answer


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=streams(),
    wants_usage=st.booleans(),
    keep=st.none() | st.integers(1, 12) | st.just(8192),
    # The public name answers carry: none, the upstream's own, another (one needing escapes).
    model=st.sampled_from([None, "m", "smol", 'a"b\\c']),
)
def test_plain_block_path_equals_event_path(
    stream: tuple[list[bytes], bool], wants_usage: bool, keep: int | None, model: str | None
) -> None:
    blocks, chat = stream
    fast = _run(blocks, chat, wants_usage, True, keep, model)
    assert fast == _run(blocks, chat, wants_usage, False, keep, model)
    if model is not None and fast[1] is None:  # every event carries the public name
        for line in fast[0].split(b"\n"):
            if line.startswith(b"data: {") and b'"model"' in line:
                assert orjson.loads(line[6:])["model"] == model


@pytest.mark.parametrize("sampled", [False, True])
def test_shaped_events_are_taken_and_relayed(sampled: bool) -> None:
    """After the first content event, plain events take the shaped path; `"usage": null`
    (which the gateway asked for) is still removed for a client that did not ask. A sampled
    answer gets their texts."""
    head = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"%d"},"finish_reason":null}]'
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    events = [head % i + b',"usage":null}\n\n' for i in range(16)]
    record = Record(request_id="r", door="chat", model="m", stream=True)
    capture = Capture(record, None, keep_text=True) if sampled else None
    tap = StreamTap(record, client_wants_usage=False, split_think=False, capture=capture)
    shaped = 0  # events taken without parsing: one by one, or a whole block at once
    one, block, run = tap._shaped, tap._block, tap._plain

    def spy_one(event: bytes, now: float) -> bytes | None:
        nonlocal shaped
        out = one(event, now)
        shaped += out is not None
        return out

    def spy(taker: Any) -> Any:
        def taken(whole: bytes, pos: int, now: float) -> tuple[int, bytes] | None:
            nonlocal shaped
            out = taker(whole, pos, now)
            shaped += out[1].count(b"\n\n") if out is not None else 0
            return out

        return taken

    tap._shaped, tap._block, tap._plain = spy_one, spy(block), spy(run)  # type: ignore[method-assign]
    out = tap.feed(role) + tap.feed(b"".join(events[:3])) + tap.feed(b"".join(events[3:]))
    assert shaped == 15
    assert out.count(b"data: ") == 17 and b"usage" not in out
    assert out.endswith(b"".join(events[3:]).replace(b',"usage":null', b""))
    assert record.chunks == 17
    if capture is not None:
        assert capture.answer == "".join(map(str, range(16)))


def test_shaped_events_carry_the_public_model_and_keep_their_escapes() -> None:
    """The model id is swapped in the bytes: texts escaped other than as orjson would are
    relayed as received (not written anew), shaped or not."""
    head = b'data: {"id":"x","model":"up/m","choices":[{"index":0,"delta":{"content":"%s"}}]}'
    events = [head % t + b"\n\n" for t in (b"a", b"\\u00e9", b"b", b"\\u00e9c")]
    record = Record(request_id="r", door="chat", model="m", stream=True)
    tap = StreamTap(record, client_wants_usage=False, split_think=False, model="pub")
    out = tap.feed(events[0]) + tap.feed(events[1]) + tap.feed(b"".join(events[2:]))
    assert tap._shape is not None and record.chunks == 4
    assert out == b"".join(events).replace(b'"up/m"', b'"pub"')


@pytest.mark.parametrize("chat", [True, False])
def test_logprob_events_are_shaped_and_a_shape_that_keeps_missing_is_given_up(chat: bool) -> None:
    """Events that carry logprobs take the shaped path (their value parsed alone); where the
    learnt shape keeps missing (logprobs in another place than the learnt one), the tap gives it
    up and relays the rest through the event path alone, the bytes unchanged."""
    key = b'"delta":{"content":"%d"}' if chat else b'"text":"%d"'
    lp = b'"logprobs":{"content":[{"token":"%d","logprob":-0.5,"top_logprobs":[]}]}'
    vllm = b'data: {"choices":[{"index":0,' + key + b"," + lp + b',"finish_reason":null}]}\n\n'
    other = b'data: {"choices":[{"index":0,"finish_reason":null,' + key + b"," + lp + b"}]}\n\n"
    for shape, taken in ((vllm, 20), (other, 0)):
        record = Record(request_id="r", door="chat", model="m", stream=True)
        tap = StreamTap(record, client_wants_usage=True, split_think=False, chat=chat)
        events = [shape % (i, i) for i in range(21)]
        out = b"".join(tap.feed(e) for e in events)
        assert out == b"".join(events) and record.chunks == 21
        assert tap._hits == taken
        assert (tap._shape is None) == (taken == 0)  # given up


ONE_EVENT_TEXTS = [
    b"a",
    b" \xc3\xa9\xe6\xbc\xa2",
    b"\\n",
    b'\\"',
    b">",
    b"b<think>c",
    b"d</think>",
    b"e",
]


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize(
    ("wants_usage", "usage_null", "model"), [(True, False, None), (False, True, "pub")]
)
@pytest.mark.parametrize("last", [b"f", b"\xff", b"\\x", b"\t", b"\\u003cthink>"])
def test_one_event_blocks_leave_what_the_event_path_leaves(
    chat: bool, wants_usage: bool, usage_null: bool, model: str | None, last: bytes
) -> None:
    """A paced stream's blocks, one event each, which `feed` checks first: plain texts, UTF-8,
    escapes, `>` and think tags after the shape was learnt, relayed as received or rewritten
    (`"usage": null` dropped, the public model name); then a text that is not UTF-8, a bad
    escape or a raw tab (the stream fails as the event path fails it), or an escaped think tag
    (which the event path splits into reasoning)."""
    key = b'"delta":{"content":"%s"}' if chat else b'"text":"%s"'
    tail = b',"usage":null}' if usage_null else b"}"
    shaped = (
        b'data: {"id":"x","created":1,"model":"up","choices":[{"index":0,'
        + key
        + b',"finish_reason":null}]'
    )
    blocks = [shaped % t + tail + b"\n\n" for t in [*ONE_EVENT_TEXTS, last]]
    blocks.append(b"data: [DONE]\n\n")
    fast = _run(blocks, chat, wants_usage, True, model=model)
    assert fast == _run(blocks, chat, wants_usage, False, model=model)
    assert (fast[1] is None) == (last in (b"f", b"\\u003cthink>"))


LOGPROBS = b'{"content":[{"token":"t","logprob":-1.5e-07,"bytes":[116],"top_logprobs":[]}]}'


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("model", [None, "pub"])
@pytest.mark.parametrize(
    ("last", "value"),
    [
        (b"f", LOGPROBS),
        (b"\xff", LOGPROBS),  # not UTF-8
        (b"\\x", LOGPROBS),  # a bad escape
        (b"\\u003cthink>", LOGPROBS),  # an escaped think tag
        (b"f", b'{"content":[{"token":"t","logprob":-1.5,}]}'),  # not JSON
        (b"f", b'{"content":[{"token":"t","logprob":1e999}]}'),  # a number orjson refuses
        (b"f", b"[" * 300 + b"]" * 300),  # too deep to take alone
        (b"f", b'{"model":"up","content":[]}'),  # the model id inside
    ],
)
def test_one_event_blocks_with_logprobs_leave_what_the_event_path_leaves(
    chat: bool, model: str | None, last: bytes, value: bytes
) -> None:
    """A paced stream's blocks with logprobs, one event each, which `feed` takes in one call
    (`gateway/serving/valued_tokens.py`): texts as the test above has them, then a last one
    with its text or its logprobs amiss."""
    key = b'"delta":{"content":"%s"}' if chat else b'"text":"%s"'
    shaped = (
        b'data: {"id":"x","created":1,"model":"up","choices":[{"index":0,'
        + key
        + b',"logprobs":%s,"finish_reason":null}]}\n\n'
    )
    # (A think tag in a chat's text sends the rest of the stream to the event path.)
    texts = [t for t in ONE_EVENT_TEXTS if not (chat and b"think>" in t)]
    blocks = [shaped % (t, LOGPROBS) for t in texts] + [shaped % (last, value)]
    blocks.append(b"data: [DONE]\n\n")
    fast = _run(blocks, chat, True, True, model=model)
    assert fast == _run(blocks, chat, True, False, model=model)
    if value == LOGPROBS:  # the stream fails as the event path fails it, for its text alone
        assert (fast[1] is None) == (last in (b"f", b"\\u003cthink>"))
    elif b",}" in value or b"1e999" in value:
        assert fast[1] is not None


def test_a_block_that_only_ends_like_a_shaped_event_is_not_taken() -> None:
    """A block as long as a shaped event with the learnt end but not the learnt start, whose
    bytes the text check would let through (as many quotes as the start is long), is no
    token: it goes to the event path, which finds it is no JSON."""
    head = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"'
    blocks = [head + t + b'"},"finish_reason":null}]}\n\n' for t in (b"a", b"b")]
    blocks.append(b"data: {" + b'"' * len(head) + b'"},"finish_reason":null}]}\n\n')
    fast = _run(blocks, True, True, True)
    assert fast == _run(blocks, True, True, False)
    assert fast[1] == "upstream sent an event that is not valid JSON"


def test_an_event_nested_too_deep_to_write_anew_is_a_malformed_stream() -> None:
    """An event the tap must rewrite (its `"usage": null` removed) but orjson cannot write
    (nested deeper than it writes) fails the stream as malformed, not with a TypeError."""
    deep = b"[" * 300 + b"]" * 300
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"a"},"logprobs":%s}],"usage":null}'
    record = Record(request_id="r", door="chat", model="m", stream=True)
    tap = StreamTap(record, client_wants_usage=False, split_think=False)
    with pytest.raises(MalformedStream, match="nested too deep"):
        tap.feed(raw % deep + b"\n\n")


def test_usage_chunk_written_when_the_upstream_sent_none() -> None:
    raw = (
        b'data: {"id":"c1","created":5,"model":"up",'
        b'"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
        b"data: [DONE]\n\n"
    )
    record = Record(request_id="r", door="chat", model="pub", stream=True)
    tap = StreamTap(
        record, client_wants_usage=True, split_think=False, model="pub", prompt_tokens=lambda: 9
    )
    out = tap.feed(raw) + tap.finish()
    events = [orjson.loads(x[6:]) for x in out.split(b"\n\n") if x.startswith(b"data: {")]
    assert events[-1] == {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "pub",
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }
    assert b": plumbline usage estimated\n\n" in out and out.endswith(b"data: [DONE]\n\n")
    assert record.usage_estimated and (record.prompt_tokens, record.completion_tokens) == (9, 1)


VLLM_STREAMS = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("name", "chat", "tokens", "finish"),
    [
        ("vllm026_chat_stream.txt", True, 8, "stop"),
        ("vllm026_completions_stream.txt", False, 16, "length"),
        ("vllm026_chat_logprobs_stream.txt", True, 8, None),
    ],
)
def test_real_vllm_streams_take_the_fast_path_as_the_event_path_would(
    name: str, chat: bool, tokens: int, finish: str | None
):
    # Streams captured from vLLM 0.26.0 on the issue-20 H200, one event per block as it sends
    # them: its chunks carry `token_ids`, `stop_reason` and `prompt_token_ids` as nulls.
    raw = (VLLM_STREAMS / name).read_bytes()
    blocks = [event + b"\n\n" for event in raw.split(b"\n\n") if event.strip()]
    fast = _run(blocks, chat, True, True)
    assert fast == _run(blocks, chat, True, False)
    out, error, fields, _ = fast
    assert error is None and out.endswith(b"data: [DONE]\n\n")
    assert fields["completion_tokens"] == tokens
    if finish is not None:
        assert fields["finish_reason"] == finish
    record = Record(request_id="r", door="chat", model="m", stream=True)
    tap = StreamTap(record, client_wants_usage=True, split_think=False, chat=chat)
    for block in blocks:
        tap.feed(block)
    tap.finish()
    token_events = sum(
        1
        for b in blocks
        if b.startswith(b"data: {")
        and (choices := orjson.loads(b[6:])["choices"])
        and not choices[0].get("finish_reason")
        and (choices[0].get("text") or (choices[0].get("delta") or {}).get("content"))
    )
    if "logprobs" not in name:  # all but the one the shape is learnt from are taken by bytes
        assert tap._hits == token_events - 1


def test_a_shape_is_given_up_after_its_misses_each_counted_once():
    # One token event teaches the shape; then tool-call deltas, one event per block, miss it.
    # Each is tried twice (the one-event check, then the event path's own try) but counts once:
    # the shape is given up on the ninth miss (more than 8, more than the one hit), not the fifth.
    def chunk(delta: dict[str, Any]) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return b"data: " + orjson.dumps(body | {"choices": [choice]}) + b"\n\n"

    record = Record(request_id="r", door="chat", model="m", stream=True)
    tap = StreamTap(record, client_wants_usage=False, split_think=False)
    tap.feed(chunk({"content": "Hi"}))
    tap.feed(chunk({"content": " there"}))  # taken by bytes: one hit
    call = {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
    for n in range(1, 10):
        tap.feed(chunk(call))
        assert (tap._shape is None) == (n == 9), n
