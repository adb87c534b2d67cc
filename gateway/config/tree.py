"""The config tree's root, `Config`, its cross-checks, and loading it from TOML (the tables:
gateway/config/__init__.py)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from gateway.config.access import AccessConfig
from gateway.config.costs import Node, Price
from gateway.config.frozen import Frozen, Name
from gateway.config.profiles import Profile
from gateway.config.routes import RouteConfig
from gateway.config.routes import cross_check as routes_cross_check
from gateway.config.schedule import EvalSchedule
from gateway.config.server import ServerConfig, StoreConfig
from gateway.config.telemetry import TelemetryConfig
from gateway.config.trust import WatchdogConfig
from gateway.config.trust import cross_check as trust_cross_check
from gateway.config.upstreams import Upstream, window_flag
from gateway.errors import ConfigError, describe


class Config(Frozen):
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
        problems += trust_cross_check(self.models, set(names))
        problems += routes_cross_check(self.models, set(names))
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
