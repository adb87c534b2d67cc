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

Each table's models live in their own module; this package re-exports the names the rest of the
gateway imports (`from gateway.config import Config`).
"""

from gateway.config.access import AccessConfig, ApiKey
from gateway.config.costs import Node, Price
from gateway.config.frozen import Frozen, Name
from gateway.config.profiles import Profile, Sampling
from gateway.config.routes import RouteConfig
from gateway.config.schedule import LANE_KEY_VAR, EvalSchedule
from gateway.config.server import ServerConfig, StoreConfig
from gateway.config.telemetry import TelemetryConfig
from gateway.config.tree import (
    Config,
    builtin_profiles,
    default_config_path,
    environment,
    listening,
    listening_from_env,
    load_config,
    parse_config,
    prometheus_multiproc_dir,
)
from gateway.config.upstreams import LaunchConfig, ProviderRouting, Upstream
from gateway.errors import ConfigError

__all__ = [
    "LANE_KEY_VAR",
    "AccessConfig",
    "ApiKey",
    "Config",
    "ConfigError",
    "EvalSchedule",
    "Frozen",
    "LaunchConfig",
    "Name",
    "Node",
    "Price",
    "Profile",
    "ProviderRouting",
    "RouteConfig",
    "Sampling",
    "ServerConfig",
    "StoreConfig",
    "TelemetryConfig",
    "Upstream",
    "builtin_profiles",
    "default_config_path",
    "environment",
    "listening",
    "listening_from_env",
    "load_config",
    "parse_config",
    "prometheus_multiproc_dir",
]
