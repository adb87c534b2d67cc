"""Config of shape routing: `[models.NAME.shapes]`, a sub-route per task shape.

    [models.smart.shapes]
    tools = ["api-a"]             # requests with tools go to api-a (then the route's fallbacks)
    long_context = ["api-b"]      # prompts of long_context_tokens or more, or over a window
    reasoning = "thinker"         # a string: another route's upstreams
    math = "thinker"              # maths problems (numbers and operators, "prove", "solve"…)
    long_context_tokens = 16000

A shape without a rule (and `default`) keeps the route's own upstreams. The shapes are
gateway/serving/shape.py's; an unknown one is an error (unknown keys are), and `cross_check` names
unknown upstreams and routes. Same rules as gateway/config/__init__.py: frozen, no unknown keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from gateway.config import Config

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/@+-]+$")]
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


class Shapes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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


def shape_upstreams(config: Config, model: str) -> list[str]:
    """Every upstream a route's shapes may send to that is not already one of its primaries."""
    route = config.models[model]
    out: list[str] = []
    for shape in route.shapes.named() if route.shapes else ():
        for name in route.shapes.upstreams_for(shape, config.models) or ():  # type: ignore[union-attr]
            if name not in route.upstreams and name not in out:
                out.append(name)
    return out


def cross_check(config: Config) -> list[str]:
    """Problems naming unknown upstreams and routes in shape rules (empty when none)."""
    problems: list[str] = []
    known = {u.name for u in config.upstreams}
    for model, route in config.models.items():
        shapes: Shapes | None = getattr(route, "shapes", None)
        if shapes is None:
            continue
        for shape, rule in shapes.named().items():
            where = f"models.{model}.shapes.{shape}"
            if isinstance(rule, str):
                if rule not in config.models:
                    problems.append(f"{where}: unknown route {rule!r}")
                elif rule == model:
                    problems.append(f"{where}: a route's shape cannot name the route itself")
                continue
            problems += [f"{where}: unknown upstream {ref!r}" for ref in rule if ref not in known]
    return problems


def shape_candidates(config: Config, model: str, shapes: Iterable[str]) -> dict[str, list[str]]:
    """For each of `shapes`: the upstreams a request of that shape routes to (its rule's, else
    the route's own primaries)."""
    route = config.models[model]
    own = list(route.upstreams)
    if route.shapes is None:
        return {shape: own for shape in shapes}
    return {shape: route.shapes.upstreams_for(shape, config.models) or own for shape in shapes}
