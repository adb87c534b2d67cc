"""One client request after its front door, door-agnostic from here on: what dispatch and the
relay serve (gateway/serving/dispatch.py, relay.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.ledger.record import Record

if TYPE_CHECKING:
    from starlette.types import Send

    from gateway.config import Upstream
    from gateway.serving.outlet import Direct
    from gateway.serving.upstream import Opened

log = logging.getLogger("plumbline")


class Translator(Protocol):
    """A front door that speaks another API renders the chat-completions answer in its own.

    `whole` gets the (tapped) chat.completion object and returns the door's body; `feed` gets
    tapped chat SSE bytes (whole events, ending with `data: [DONE]`, or an OpenAI error event
    `data: {"error": …}` when the upstream broke mid-stream) and returns the door's SSE bytes.
    """

    def whole(self, chat: dict[str, Any]) -> bytes: ...

    def feed(self, sse: bytes) -> bytes: ...


class Head(Protocol):
    """A stream that can begin from the upstream connection's callback: given to dispatch
    (`Call.head`) by the relay when the server's `send` is in hand (the edge's requests).

    `prepare` is called once an attempt's request is written, while that upstream prefills
    (what the stream needs that does not wait for its first event, built then); `begin` once
    that attempt's first data event has been checked, in the callback that brought it: the
    client's head and that event are written there and then, and the stream is relayed from then
    on. Until `begin`, nothing has reached the client and dispatch may still move on."""

    def prepare(self, upstream: Upstream, native: bool) -> None: ...

    def begin(self, opened: Opened) -> None: ...

    def abandon(self) -> None: ...


@dataclass(slots=True)
class Call:
    """One client request after its front door: door-agnostic from here on."""

    door: str
    path: str  # upstream path: /chat/completions, /completions, /embeddings
    model: str
    body: dict[str, Any]
    stream: bool
    record: Record
    client_wants_usage: bool = False
    session: str | None = None
    translator: Translator | None = None
    # The door's own request, relayed as is to upstreams that implement that API natively
    # (`Upstream.responses_api`); `body` (the chat translation) goes to the others.
    native: dict[str, Any] | None = None
    # Eval lane only: the upstream named by `x-plumbline-upstream` (gateway/trust/gate.py).
    pin: str | None = None
    # The prompt's `adapt.prompt_bounds`, counted once by dispatch (routing, the shape and each
    # attempt's window check read it; none of them changes the messages).
    bounds: tuple[int, int] | None = None
    # (tokenizer source, the prompt's tokens by it), where dispatch counted them near the window
    # (gateway/serving/tokenizer.py).
    counted: tuple[str, int] | None = None
    # store_content: the request's body as received, for its stored prompt (None when off).
    prompt: bytes | None = None
    # Work the upstream does not wait for (the record's params hash, the text sample, the
    # shadow's mirror): run once the request has been written to the first upstream tried,
    # while that upstream reads and prefills it, or when dispatch ends without one (`flush`).
    later: list[Callable[[], None]] = field(default_factory=list)
    # Streams served by the edge: the server's `send` (the relay makes the call's `head` of it).
    send: Send | None = None
    # Where the server offers them, its direct writes for that `send`: a body block's writer
    # and a cork (`gateway/serving/outlet.py`).
    direct: Direct | None = None
    head: Head | None = None
    # The id the client sent in `x-request-id`, echoed on its answer (the record's id otherwise).
    client_request_id: str | None = None

    @property
    def chat(self) -> bool:
        return self.path == "/chat/completions"

    def defer(self, work: Callable[[], None]) -> None:
        """Do `work` once the request is on its way (or dispatch has ended without sending)."""
        self.later.append(work)

    def flush(self) -> None:
        """Run what was deferred, each piece once, in the order it was deferred. A piece that
        fails is logged and the rest still run: bookkeeping never fails the request it is for
        (nor leaves the upstream's in-flight count behind, as failing inside the send would)."""
        later = self.later
        while later:
            work = later.pop(0)
            try:
                work()
            except Exception:
                log.exception("work deferred until the request was sent failed")
