"""Adapting a request to the upstream chosen for it, at dispatch, one attempt at a time.

A front door produces one chat-completions (or completions) body; each upstream kind takes a
different set of fields and serves a different window. `adapt` is a pure function of the body
and one upstream:

1. **Capability.** Each kind has a table of the extension fields it takes (`TAKES`; an
   upstream's `accepts` adds to it). A field it does not take is either
   - *stripped and marked* when removing it changes how the answer is sampled or templated but
     not what was asked (top_k, min_p, repetition_penalty, chat_template_kwargs…): named in
     `x-plumbline-dropped`, on the record (`dropped`) and in `gateway_dropped_fields_total`, and
     logged once per upstream and field; or
   - *refused* (`Unfit`, a 400 naming field and upstream) when removing it would silently change
     the answer's meaning (guided decoding, a stop-token list, `n` > 1 on llama.cpp, which serves
     one choice). Dispatch then routes past to the next candidate; only when every candidate is
     unfit does the client get the 400.
2. **Parity.** The request's meaning (`Semantics`, gateway/serving/semantics.py) is read once
   and said in the upstream's dialect (`translate`, gateway/serving/dialect.py), which names
   every part of it the upstream cannot be told (`Gap`). A local engine of a profiled route gets
   every sampling parameter explicitly (`NEUTRAL` for what neither the client nor the profile
   set). The params hash is made over the meaning, the gaps and the route's `accept_unequal`,
   not over the bytes sent, so a node and a provider asked the same thing hash the same.
3. **Window.** When the upstream's window is known (`Config.upstream_window`), a prompt that is
   certainly over it is refused (400 `context_length_exceeded`, the sizes named), and a
   `max_tokens` / `max_completion_tokens` that cannot fit beside the prompt is clamped to what
   does and marked (`x-plumbline-clamped: max_tokens=32000->7000`, the record's `clamped`,
   `gateway_clamped_total`). The prompt is counted from its UTF-8 bytes (`prompt_bounds`);
   where that puts it near the window and the upstream's tokenizer is known, dispatch counts
   it with that tokenizer (gateway/serving/tokenizer.py) and the clamp leaves the room that
   count leaves (`counted`). The byte floor still refuses a prompt certainly over the window.

Dialect (field names, llama.cpp's response_format) is `upstream.body_for`'s, after this.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gateway.config import Config, Upstream
from gateway.errors import ContextExceeded, Unfit
from gateway.ledger.record import Record
from gateway.serving.capability import (
    EXTENSIONS,
    MEANINGFUL,
    ONE_CHOICE,
    STRIPPABLE,
    carrier_of,
    table_of,
    takes,
)
from gateway.serving.capability import capability_markdown as capability_markdown
from gateway.serving.dialect import Carrier, Gap, accepted_keys, translate
from gateway.serving.dropped import mark_dropped
from gateway.serving.semantics import NEUTRAL, Semantics

if TYPE_CHECKING:
    from gateway.serving.call import Call

log = logging.getLogger(__name__)

CLAMPED_HEADER = "x-plumbline-clamped"

_WARNED: set[tuple[str, str]] = set()  # (upstream, field) already logged as stripped


@dataclass(slots=True)
class Adapted:
    """The body for one upstream and what was done to it, marked on the record when the attempt
    succeeds (a failed attempt's marks would describe an upstream that did not answer).
    `meaning`: what the request asks; `gaps`: what of it this upstream could not be told;
    `accepted`: the meaning's keys the route accepts as unequal; `defaults`: the dialect whose
    engine fills what an unprofiled body leaves unset; `require`: OpenRouter must be told
    `require_parameters`. The params hash is worked out when first asked (dispatch asks once the
    request is sent: the upstream does not wait for it)."""

    body: dict[str, Any]
    stripped: tuple[str, ...] = ()
    clamped: str | None = None
    defaults: str | None = None
    meaning: Semantics = field(default_factory=Semantics)
    gaps: tuple[Gap, ...] = ()
    accepted: frozenset[str] = frozenset()
    require: bool = False
    _digest: str | None = None

    @property
    def params_hash(self) -> str:
        if self._digest is None:
            unsent = [g.key for g in self.gaps]
            self._digest = self.meaning.digest(self.defaults, unsent, self.accepted)
        return self._digest

    def asked_hash(self, asked: dict[str, Any]) -> str | None:
        """`profile.params_hash` of `asked`, the body this was adapted from, from the meaning
        read here (not read again); None where `asked` said `repeat_penalty` (the one field
        adapting renames before the meaning is read). Where the attempt's hash has nothing of
        the upstream in it (no gap, no key accepted as unequal, no engine defaults), it is
        that hash."""
        if "repeat_penalty" in asked:
            return None
        if not (
            self.gaps or self.accepted or (self.meaning.defaults and self.defaults is not None)
        ):
            return self.params_hash
        return self.meaning.digest()

    def unsent(self) -> tuple[list[Gap], list[Gap]]:
        """(gaps not accepted, gaps the route accepts)."""
        accepted = [g for g in self.gaps if g.key in self.accepted]
        return [g for g in self.gaps if g.key not in self.accepted], accepted

    def mark(self, record: Record) -> None:
        if self.stripped:  # marking nothing leaves `dropped` as it is
            mark_dropped(record, *self.stripped)
        record.clamped = self.clamped
        record.params_hash = self.params_hash
        if record.lane != "client":  # what an eval or shadow arm was asked, said in words
            record.semantics = self.meaning.describe() or None
        if self.gaps:
            unsent, accepted = self.unsent()
            record.unsent = "; ".join(map(str, unsent)) or None
            record.accepted_unequal = "; ".join(map(str, accepted)) or None


def adapt(
    body: dict[str, Any],
    upstream: Upstream,
    window: int | None,
    complete: bool,
    bounds: tuple[int, int] | None = None,
    carrier: Carrier | None = None,
    accepted: frozenset[str] = frozenset(),
    counted: int | None = None,
) -> Adapted:
    """`body` as `upstream` can serve it (a copy; `body` is not changed). `complete`: the route
    has a profile, so a local engine gets every sampling parameter written out. `bounds`: the
    body's `prompt_bounds` where the caller has them (adapting leaves the prompt as it is).
    `carrier`: what the upstream can be told (`carrier_of`); `accepted`: the meaning's keys the
    route accepts as unequal (`dialect.accepted_keys`); `counted`: the prompt's tokens by the
    upstream's tokenizer, where counted. Raises `Unfit`."""
    out = dict(body)
    if "repeat_penalty" in out:  # llama.cpp's name, said by a client: one name from here on
        said = out.pop("repeat_penalty")
        out.setdefault("repetition_penalty", said)
    if isinstance(out.get("top_k"), int) and out["top_k"] < 0:
        out["top_k"] = 0  # -1 and 0 both mean "off"; llama.cpp refuses -1
    meaning = Semantics.of(out, complete)
    stripped = _fit(out, upstream)
    gaps, require = translate(out, meaning, carrier or carrier_of(upstream))
    for gap in gaps:
        if (upstream.name, f"unsent {gap.field}") not in _WARNED:
            _WARNED.add((upstream.name, f"unsent {gap.field}"))
            log.warning("%s: not enforced there, not at parity (x-plumbline-unsent)", gap)
    if complete and upstream.is_local:
        for key, value in NEUTRAL.items():
            if out.get(key) is None:
                out[key] = value
    clamped = None
    if window is not None:
        clamped = _clamp(out, upstream, window, bounds or prompt_bounds(out), counted)
    return Adapted(
        out,
        tuple(stripped),
        clamped,
        table_of(upstream),
        meaning,
        tuple(gaps),
        accepted,
        require,
    )


def _fit(out: dict[str, Any], upstream: Upstream) -> list[str]:
    """Refuse what cannot be served here; strip (in place) and return what may go unsaid."""
    n = out.get("n")
    if EXTENSIONS.isdisjoint(out):  # no extension field: only `n` is for this upstream to say
        if isinstance(n, int) and n > 1 and upstream.kind in ONE_CHOICE:
            raise _one_choice(n, upstream)
        return []
    taken = takes(upstream)
    for name in (*MEANINGFUL, *STRIPPABLE):  # a field set to nothing asks for nothing
        if name in out and name not in taken and _nothing(out[name]):
            del out[name]
    for name in MEANINGFUL:
        if name in out and name not in taken:
            raise Unfit(
                f"{name!r} cannot be served by upstream {upstream.name!r} ({upstream.kind}): it "
                "would be ignored there, and the answer would not be what was asked.",
                param=name,
            )
    if isinstance(n, int) and n > 1 and upstream.kind in ONE_CHOICE:
        raise _one_choice(n, upstream)
    stripped = [name for name in STRIPPABLE if name in out and name not in taken]
    for name in stripped:
        del out[name]
        if (upstream.name, name) not in _WARNED:
            _WARNED.add((upstream.name, name))
            log.warning(
                "upstream %s (%s) does not take %r: stripped and marked (x-plumbline-dropped); "
                "set [[upstreams]] accepts if it does",
                upstream.name,
                upstream.kind,
                name,
            )
    return stripped


def _one_choice(n: int, upstream: Upstream) -> Unfit:
    return Unfit(
        f"'n' = {n} cannot be served by upstream {upstream.name!r} ({upstream.kind}): it "
        "answers one choice per request.",
        param="n",
    )


def _nothing(value: Any) -> bool:
    """None, false or empty (not a number: top_k 0 is a value)."""
    return value is None or value is False or (isinstance(value, list | dict | str) and not value)


def _clamp(
    out: dict[str, Any],
    upstream: Upstream,
    window: int,
    bounds: tuple[int, int],
    counted: int | None = None,
) -> str | None:
    """Refuse a prompt certainly over `window` (`bounds`: its `prompt_bounds`; `counted`: its
    tokens by the upstream's tokenizer, which decides where there is one: a template need not
    render all the bytes count); clamp (in place) a cap that cannot fit."""
    low, high = bounds
    over = counted >= window if counted is not None else low >= window
    if over:
        n, how = (low, "the gateway's count") if counted is None else (counted, "its tokenizer")
        raise ContextExceeded(
            f"prompt is too long: {n} tokens > {window} maximum (at least {n} tokens by "
            f"{how}; {upstream.name!r} serves a context window of {window} tokens).",
            param="messages" if "messages" in out else "prompt",
        )
    if counted is not None:
        room = window - counted
    else:
        room = window - high if window - high >= 1 else window - low
    marks = []
    for name in ("max_tokens", "max_completion_tokens"):
        asked = out.get(name)
        if isinstance(asked, int) and asked > room:
            out[name] = room
            marks.append(f"{name}={asked}->{room}")
    return ",".join(marks) or None


# Tokens a chat template adds around each message (role markers, separators), at least.
PER_MESSAGE = 4
# UTF-8 bytes per token: no tokenizer we know packs text denser than LOW_DIVISOR bytes a token
# (the refusal's count), and English prose and code rarely come below HIGH_DIVISOR (the clamp's
# count, which leaves room for the answer). Non-Latin text on an English-centric tokenizer can
# take more tokens than that; the upstream's own error then stands.
LOW_DIVISOR = 6
HIGH_DIVISOR = 3


def prompt_bounds(body: dict[str, Any]) -> tuple[int, int]:
    """(fewest, likeliest most) prompt tokens of a request, without a tokenizer: token ids are
    counted exactly; text by its UTF-8 bytes; images are not counted."""
    if "messages" in body:
        size, messages = chat_size(body)
        extra = PER_MESSAGE * messages
        return size // LOW_DIVISOR + extra, math.ceil(size / HIGH_DIVISOR) + extra
    prompt = body.get("prompt")
    prompts = prompt if isinstance(prompt, list) and not token_ids(prompt) else [prompt]
    low = high = 0
    for one in prompts:  # each prompt of a batch is its own sequence
        if isinstance(one, list) and token_ids(one):
            low, high = max(low, len(one)), max(high, len(one))
        elif isinstance(one, str):
            size = utf8_size(one)
            low, high = max(low, size // LOW_DIVISOR), max(high, math.ceil(size / HIGH_DIVISOR))
    return low, high


def chat_size(body: dict[str, Any]) -> tuple[int, int]:
    """(UTF-8 bytes of a chat request's text and tools, its messages): what `prompt_bounds`
    and accounting's `prompt_estimate` count tokens from."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    size = sum(_text_bytes(m) for m in messages)
    tools = body.get("tools")
    if tools:
        size += len(orjson.dumps(tools))
    return size, len(messages)


def utf8_size(text: str) -> int:
    """`len(text.encode())`, without encoding it when it is ASCII (one byte a character; the
    check reads a flag of the string, where encoding copies a long prompt)."""
    return len(text) if text.isascii() else len(text.encode())


def token_ids(value: list[Any]) -> bool:
    """Whether a prompt is a list of token ids (counted exactly)."""
    return bool(value) and all(isinstance(t, int) for t in value)


def _text_bytes(message: Any) -> int:
    """UTF-8 bytes of a chat message's text: content (strings and text parts), tool calls."""
    if not isinstance(message, dict):
        return 0
    size = 0
    content = message.get("content")
    if isinstance(content, str):
        size += utf8_size(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                size += utf8_size(part["text"])
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            size += len(orjson.dumps(call.get("function")))
    return size


def adapt_call(
    config: Config,
    call: Call,
    upstream: Upstream,
    learned: int | None = None,
    counted: int | None = None,
) -> Adapted | None:
    """`adapt` for one attempt of `call` on `upstream`; None where the body goes as it is (a
    Responses request relayed natively, embeddings). `learned`: the window the server says it
    serves (`Engines.windows`). Raises `Unfit`."""
    if call.path == "/embeddings" or (call.native is not None and upstream.responses_api):
        return None
    return adapt_body(config, call.model, call.body, upstream, learned, call.bounds, counted)


def adapt_body(
    config: Config,
    model: str,
    body: dict[str, Any],
    upstream: Upstream,
    learned: int | None = None,
    bounds: tuple[int, int] | None = None,
    counted: int | None = None,
) -> Adapted:
    """`adapt` for `body` of route `model` on `upstream`, with what the config says: the
    route's profile and `accept_unequal`, the upstream's window and what it can be told."""
    complete = config.profile_for(model) is not None
    window = config.upstream_window(upstream, learned)
    route = config.models.get(model)
    accepted = accepted_keys(route.accept_unequal) if route is not None else frozenset()
    carrier = carrier_of(upstream, config)
    return adapt(body, upstream, window, complete, bounds, carrier, accepted, counted)
