"""Config of shape routing: `[models.NAME.shapes]`, a sub-route per task shape.

    [models.smart.shapes]
    tools = ["api-a"]             # requests with tools go to api-a (then the route's fallbacks)
    long_context = ["api-b"]      # prompts of long_context_tokens or more, or over a window
    reasoning = "thinker"         # a string: another route's upstreams
    math = "thinker"              # maths problems (numbers and operators, "prove", "solve"…)
    long_context_tokens = 16000

A shape without a rule (and `default`) keeps the route's own upstreams. The shapes are
gateway/serving/shape.py's; an unknown one is an error (unknown keys are), and `cross_check` names
unknown upstreams and routes. Same rules as gateway/config/frozen.py: frozen, no unknown keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.config.frozen import Frozen, Name
from gateway.config.trust import GateConfig, ShadowConfig

# An ordered list of upstreams, or the name of another route whose upstreams serve the shape.
SubRoute = Annotated[list[Name], Field(min_length=1)] | Name
# The task shapes of gateway/serving/shape.py, in the order its classifier checks them; every
# one but `default` may have a rule. Bounded: the shape is a metric label.
SHAPES = ("tools", "long_context", "edit", "structured", "reasoning", "math", "default")
RULED = SHAPES[:-1]
# What a route's `accept_unequal` may name: the parts of a request's meaning an upstream's dialect
# may be unable to carry (gateway/serving/dialect.py). Anything else is refused at load.
Unequal = Literal[
    "top_k",
    "min_p",
    "repetition_penalty",
    "enable_thinking",
    "thinking",
    "reasoning_effort",
    "thinking_token_budget",
    "chat_template_kwargs",
    "require_parameters",
]


class Shapes(Frozen):
    # Where each shape goes: a list of upstreams, or another route's name (docs/architecture.md,
    # "Shape routing"). Requests with tools.
    tools: SubRoute | None = None
    # Prompts near or over the windows (see `long_context_tokens`).
    long_context: SubRoute | None = None
    # Code-editing requests (a diff or edit format asked for).
    edit: SubRoute | None = None
    # Structured output (response_format json_schema or guided decoding).
    structured: SubRoute | None = None
    # Requests that ask the model to reason (reasoning effort, thinking on).
    reasoning: SubRoute | None = None
    math: SubRoute | None = None
    # A prompt estimated at this many tokens or more is long_context (it is too when it is over
    # the smallest known window of the route's own upstreams). None: only the windows say.
    long_context_tokens: int | None = Field(None, ge=1)

    def rule(self, shape: str) -> list[str] | str | None:
        if shape not in RULED:
            return None
        rule: list[str] | str | None = getattr(self, shape)
        return rule

    def upstreams_for(self, shape: str, models: Mapping[str, Any]) -> list[str] | None:
        """The upstreams a request of `shape` goes to (None: the route's own)."""
        rule = self.rule(shape)
        if isinstance(rule, str):
            other = models.get(rule)
            return list(other.upstreams) if other is not None else None
        return rule

    def named(self) -> dict[str, list[str] | str]:
        """Every shape that has a rule, and its rule."""
        return {s: r for s in RULED if (r := self.rule(s)) is not None}


def shape_upstreams(models: Mapping[str, RouteConfig], model: str) -> list[str]:
    """Every upstream a route's shapes may send to that is not already one of its primaries."""
    route = models[model]
    out: list[str] = []
    for shape in route.shapes.named() if route.shapes else ():
        for name in route.shapes.upstreams_for(shape, models) or ():  # type: ignore[union-attr]
            if name not in route.upstreams and name not in out:
                out.append(name)
    return out


def cross_check(models: Mapping[str, RouteConfig], known: set[str]) -> list[str]:
    """Problems naming unknown upstreams (not in `known`) and routes in shape rules (empty
    when none)."""
    problems: list[str] = []
    for model, route in models.items():
        shapes: Shapes | None = getattr(route, "shapes", None)
        if shapes is None:
            continue
        for shape, rule in shapes.named().items():
            where = f"models.{model}.shapes.{shape}"
            if isinstance(rule, str):
                if rule not in models:
                    problems.append(f"{where}: unknown route {rule!r}")
                elif rule == model:
                    problems.append(f"{where}: a route's shape cannot name the route itself")
                continue
            problems += [f"{where}: unknown upstream {ref!r}" for ref in rule if ref not in known]
    return problems


def shape_candidates(
    models: Mapping[str, RouteConfig], model: str, shapes: Iterable[str]
) -> dict[str, list[str]]:
    """For each of `shapes`: the upstreams a request of that shape routes to (its rule's, else
    the route's own primaries)."""
    route = models[model]
    own = list(route.upstreams)
    if route.shapes is None:
        return {shape: own for shape in shapes}
    return {shape: route.shapes.upstreams_for(shape, models) or own for shape in shapes}


class RouteConfig(Frozen):
    """A public model name: which upstreams serve it, how to pick, what to fall back to."""

    # The vendor recipe applied to every request on this route (a built-in or [profiles.NAME]).
    profile: Name | None = None
    # The upstreams that serve it, by name.
    upstreams: list[Name] = Field(min_length=1)
    # How a request picks among them: the least in flight, the replica that saw the prompt's
    # prefix, a weighted split, or the cheapest within the quality gate's noise floor.
    policy: Literal["least_outstanding", "prefix_affinity", "weighted", "cheapest_within_floor"] = (
        "least_outstanding"
    )
    # Tried in order when every primary upstream is down, cooling down or saturated.
    fallback: list[Name] = Field(default_factory=list)
    # Mirror a sampled share of live requests to another upstream (gateway/trust/shadow.py).
    shadow: ShadowConfig | None = None
    # Evidence settings of the "cheapest_within_floor" policy (gateway/trust/gate.py).
    gate: GateConfig | None = None
    # A sub-route per task shape (gateway/config/routes.py, gateway/serving/shape.py).
    shapes: Shapes | None = None
    # Differences of meaning the operator accepts between this route's upstreams, by field
    # (gateway/serving/dialect.py; docs/parity.md): an upstream that cannot be sent one of them is
    # still compared at parity, and the difference is shown beside every number it affects.
    accept_unequal: list[Unequal] = Field(default_factory=list)
    # Other names clients may send for this model (a harness's "small fast" model, say);
    # resolved to this route on every door before routing; records name the route.
    aliases: list[Name] = Field(default_factory=list)
    # When a stream's response head goes to the client. "first_event": once the upstream's
    # first data event is in, so a 200 that starts with an error, a malformed event or none
    # within `ttft_timeout_s` still fails over to a retry or the next candidate. "at_once": as
    # soon as the upstream answers 200, as an engine sends its own; the client then reads the
    # head during the prefill rather than with the first token (bench/README.md measures the
    # difference), and such a first event ends the stream with an error event instead.
    stream_head: Literal["first_event", "at_once"] = "first_event"

    @property
    def names(self) -> tuple[str, ...]:
        """Every upstream this route may use: primaries, then fallbacks."""
        return (*self.upstreams, *self.fallback)
