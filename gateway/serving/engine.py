"""Which serving stack answers behind each upstream: engine version and chat template.

Two eval runs of one target are only a noise-floor control when the same stack served both. A
vLLM upgrade or a changed chat template moves scores with no change to the config, and the
noise floor would then swallow a real difference. So the health prober learns a fingerprint of
each vLLM upstream when it first finds it healthy, and again after every outage (a restart may
be an upgrade):

- the version, from vLLM's ``GET /version``;
- the chat template, as a hash of the token ids ``POST /tokenize`` makes of a fixed
  conversation with the generation prompt. It covers the template, the special tokens and the
  tokenizer, which all change what the model is shown.

Answers carry it as ``x-plumbline-engine``; the eval runner keeps it per item, and the report
refuses two runs as a control when their fingerprints differ. llama-cpp-python serves neither
endpoint, and an API provider's stack is named by its provider (``x-plumbline-provider``), so
those have none.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable
from typing import Any

import orjson

from gateway.config import Upstream
from gateway.serving.upstream import Target, root_url
from gateway.serving.wire import Origin, Wire

log = logging.getLogger(__name__)

HEADER = "x-plumbline-engine"

# A conversation with every role a chat template renders: its token ids change when the
# template, the special tokens or the tokenizer do.
PROBE = (
    {"role": "system", "content": "You are a probe."},
    {"role": "user", "content": "Hello."},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Bye."},
)


async def _json(wire: Wire, origin: Origin, path: str, head: bytes, body: bytes | None) -> Any:
    reply = await wire.post(origin, path, head, body or b"", b"POST" if body else b"GET")
    data = await reply.read()
    if reply.status >= 400:
        raise ValueError(f"{path}: HTTP {reply.status}")
    return orjson.loads(data)


async def fingerprint(wire: Wire, upstream: Upstream, timeout: float) -> str | None:
    """``vllm 0.32.0 template 1a2b3c4d5e6f`` for a vLLM upstream, None for other kinds. A part
    the server does not answer is ``?``; None when neither is answered."""
    return (await examine(wire, upstream, timeout))[0]


async def examine(wire: Wire, upstream: Upstream, timeout: float) -> tuple[str | None, int | None]:
    """(`fingerprint`, the window the server says it serves: /tokenize's ``max_model_len``)."""
    if upstream.kind != "vllm":
        return None, None
    origin, head = Origin.parse(root_url(upstream)), Target.of(upstream).head
    version = template = "?"
    window: int | None = None
    try:
        async with asyncio.timeout(timeout):
            version = str((await _json(wire, origin, "/version", head, None))["version"])
    except (TimeoutError, OSError, ValueError, KeyError, TypeError) as e:
        log.debug("engine: no version from %s (%s)", upstream.name, e)
    probe = {"model": upstream.model, "messages": PROBE, "add_generation_prompt": True}
    try:
        async with asyncio.timeout(timeout):
            said = await _json(wire, origin, "/tokenize", head, orjson.dumps(probe))
        template = hashlib.sha256(orjson.dumps(said["tokens"])).hexdigest()[:12]
        if isinstance(said.get("max_model_len"), int) and said["max_model_len"] > 0:
            window = said["max_model_len"]
    except (TimeoutError, OSError, ValueError, KeyError, TypeError) as e:
        log.debug("engine: no chat template fingerprint from %s (%s)", upstream.name, e)
    if version == template == "?":
        return None, window
    return f"vllm {version} template {template}", window


class Engines:
    """Each upstream's fingerprint, learnt by the health prober (`due`, then `learn`)."""

    def __init__(self) -> None:
        self.known: dict[str, str] = {}
        # The window each vLLM upstream says it serves (gateway/serving/adapt.py clamps to it).
        self.windows: dict[str, int] = {}
        self._down: set[str] = set()  # unhealthy at the last probe
        self._unanswered: set[str] = set()  # vLLM upstreams already logged as not answering

    def due(self, upstream: Upstream, healthy: bool) -> bool:
        """Whether to (re)learn a vLLM upstream now: healthy, and unknown or down at the last
        probe (a restart may be an upgrade)."""
        if not healthy:
            self._down.add(upstream.name)
            return False
        was_down = upstream.name in self._down
        self._down.discard(upstream.name)
        return upstream.kind == "vllm" and (was_down or upstream.name not in self.known)

    async def learn(self, wire: Wire, upstreams: Iterable[Upstream], timeout: float) -> None:
        ups = list(upstreams)
        found = await asyncio.gather(*(examine(wire, u, timeout) for u in ups))
        for upstream, (fp, window) in zip(ups, found, strict=True):
            name = upstream.name
            if window is not None:
                self.windows[name] = window
            before = self.known.pop(name, None)
            if fp is None:
                if name not in self._unanswered:
                    self._unanswered.add(name)
                    log.warning(
                        "engine: %s answers neither /version nor /tokenize: an engine change "
                        "behind it cannot be told apart in evals (asked again each probe)",
                        name,
                    )
                continue
            self.known[name] = fp
            self._unanswered.discard(name)
            if before is not None and fp != before:
                log.warning("engine: %s changed from %s to %s", name, before, fp)
