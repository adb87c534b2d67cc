"""A fake OpenRouter: one model served by several providers, routed and thinking as OpenRouter's
chat completions API says it does (openrouter.ai/docs: provider routing, reasoning tokens).

Honoured, as OpenRouter documents them:

- ``provider``: ``order`` (providers tried first, in order), ``only`` (the providers allowed),
  ``ignore``, ``allow_fallbacks`` (default true: after ``order``, any other allowed provider),
  ``require_parameters`` (only providers that take every parameter the request sets; with none
  left, a 404 "No endpoints found that can handle the requested parameters."). Each provider
  takes the parameters its entry in ``providers`` lists; one that does not take a parameter
  ignores it (recorded per request). The answer names who served it in the top-level
  ``provider`` field.
- ``reasoning``: ``enabled`` (false: no thinking), ``effort`` (``none`` … ``xhigh``: none, or
  that much thinking), ``max_tokens`` (a cap on thinking tokens), ``exclude`` (thinks but does
  not return the text). Unset: the model's default (``thinks_by_default``). The thinking comes
  back as ``message.reasoning`` and ``message.reasoning_details`` (``reasoning.text`` entries),
  counted in ``usage.completion_tokens_details.reasoning_tokens``; ``usage.cost`` is what the
  provider charged.

``ignores=True`` makes the variant an operator must catch: it answers from a provider the
request did not allow (the last one of its table that is not), and thinks whatever
``reasoning`` says.

Streams (``stream: true``) send the reasoning, then the answer, one word a chunk, each chunk
naming the provider, and a last chunk with usage. ``running_openrouter(...)`` serves it on a
free loopback port in a thread and yields a handle (``base_url``, ``requests()``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# Parameters a provider may or may not take (what require_parameters filters on).
PARAMETERS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "max_tokens",
    "response_format",
    "tools",
    "reasoning",
)
EFFORT_TOKENS = {"minimal": 4, "low": 8, "medium": 16, "high": 32, "xhigh": 48}
NO_ENDPOINT = "No endpoints found that can handle the requested parameters."

# Two providers: one takes every parameter, the other not top_k, min_p nor repetition_penalty.
DEFAULT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "Alpha": PARAMETERS,
    "Beta": tuple(p for p in PARAMETERS if p not in ("top_k", "min_p", "repetition_penalty")),
}


@dataclass
class Served:
    """One answered request: its body, who served it, what that provider ignored."""

    body: dict[str, Any]
    provider: str | None
    ignored: list[str] = field(default_factory=list)
    thought: int = 0


@dataclass
class FakeOpenRouter:
    providers: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_PROVIDERS))
    ignores: bool = False
    thinks_by_default: bool = False
    text: str = "I do not know."
    # What the provider charges (usage.cost), USD per million prompt and completion tokens.
    usd_per_m_input: float = 0.2
    usd_per_m_output: float = 0.6
    served: list[Served] = field(default_factory=list)

    # -- routing ---------------------------------------------------------------------------

    def route(self, body: dict[str, Any]) -> str | None:
        """The provider that serves `body`, as OpenRouter's `provider` object picks it (the
        ignoring variant: one it does not allow). None: no provider can."""
        said = body.get("provider")
        pref: dict[str, Any] = said if isinstance(said, dict) else {}
        names = list(self.providers)
        allowed = [p for p in names if p not in (pref.get("ignore") or [])]
        if pref.get("only"):
            allowed = [p for p in allowed if p in pref["only"]]
        order = [p for p in (pref.get("order") or []) if p in allowed]
        if pref.get("allow_fallbacks", True) or not order:
            order += [p for p in allowed if p not in order]
        if pref.get("require_parameters"):
            asked = [k for k in PARAMETERS if body.get(k) is not None]
            order = [p for p in order if all(k in self.providers[p] for k in asked)]
        if self.ignores:
            others = [p for p in names if p not in order[:1]]
            return others[-1] if others else (order[0] if order else None)
        return order[0] if order else None

    def thinking(self, body: dict[str, Any]) -> tuple[int, bool]:
        """(thinking tokens, whether the text is returned) for `body`'s `reasoning`."""
        r = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None
        if self.ignores:
            return EFFORT_TOKENS["medium"], True
        if r is None:
            return (EFFORT_TOKENS["medium"] if self.thinks_by_default else 0), True
        shown = not r.get("exclude", False)
        if r.get("enabled") is False or r.get("effort") == "none":
            return 0, shown
        tokens = EFFORT_TOKENS.get(str(r.get("effort") or "medium"), EFFORT_TOKENS["medium"])
        if isinstance(r.get("max_tokens"), int) and r["max_tokens"] > 0:
            tokens = min(r["max_tokens"], max(tokens, EFFORT_TOKENS["high"]))
        return tokens, shown

    # -- answering -------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        provider = self.route(body)
        if provider is None:
            error = {"error": {"code": 404, "message": NO_ENDPOINT}}
            self.served.append(Served(body, None))
            return JSONResponse(error, status_code=404)
        thought, shown = self.thinking(body)
        taken = self.providers[provider]
        ignored = [k for k in PARAMETERS if body.get(k) is not None and k not in taken]
        self.served.append(Served(body, provider, ignored, thought))
        words = self.text.split()
        reasoning = " ".join(f"think{i}" for i in range(thought)) if thought else None
        prompt = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        total = prompt + len(words) + thought
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(words) + thought,
            "completion_tokens_details": {"reasoning_tokens": thought},
            "total_tokens": total,
            "cost": (prompt * self.usd_per_m_input + (total - prompt) * self.usd_per_m_output)
            / 1e6,
        }
        head = {
            "id": f"gen-{uuid.uuid4().hex[:16]}",
            "provider": provider,
            "model": body.get("model"),
            "created": int(time.time()),
        }
        if body.get("stream"):
            text = reasoning if shown else None
            return StreamingResponse(
                _chunks(head, text, words, usage), media_type="text/event-stream"
            )
        message: dict[str, Any] = {"role": "assistant", "content": self.text, "refusal": None}
        if reasoning and shown:
            message["reasoning"] = reasoning
            message["reasoning_details"] = [
                {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
            ]
        choice = {
            "index": 0,
            "finish_reason": "stop",
            "native_finish_reason": "stop",
            "logprobs": None,
            "message": message,
        }
        doc = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        return Response(orjson.dumps(doc), media_type="application/json")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"data": [{"id": "vendor/fake-model", "object": "model"}]})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/api/v1/models", self.models, methods=["GET"]),
            ]
        )


async def _chunks(
    head: dict[str, Any], reasoning: str | None, words: list[str], usage: dict[str, Any]
) -> Any:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        doc = {**head, "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    yield event({"role": "assistant", "content": ""})
    for word in (reasoning or "").split():
        yield event({"content": "", "reasoning": word + " "})
    for i, word in enumerate(words):
        yield event({"content": word if i == 0 else " " + word})
    yield event({}, "stop")
    last = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
    yield b"data: " + orjson.dumps(last) + b"\n\n"
    yield b"data: [DONE]\n\n"


@dataclass
class OpenRouterHandle:
    url: str
    fake: FakeOpenRouter

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, as OpenRouter's: ``…/api/v1``."""
        return f"{self.url}/api/v1"

    def requests(self) -> list[Served]:
        return list(self.fake.served)


@contextlib.contextmanager
def running_openrouter(**kw: Any) -> Iterator[OpenRouterHandle]:
    """Serve a `FakeOpenRouter(**kw)` on a free loopback port in a thread."""
    fake = FakeOpenRouter(**kw)
    config = uvicorn.Config(
        fake.app(), host="127.0.0.1", port=0, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-openrouter", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake OpenRouter did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield OpenRouterHandle(f"http://127.0.0.1:{port}", fake)
    finally:
        server.should_exit = True
        thread.join(10)
