"""Config of `[access]`: client, admin and metrics keys (by sha256 only) and their budgets.

Owned by gateway/edge/access.py; same rules as gateway/config/__init__.py (frozen, unknown keys are
errors),
which cross-checks the model names a key may use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr

from gateway.config.frozen import Frozen, Name


class ApiKey(Frozen):
    """One key, by the hex sha256 of its plaintext (never the key itself)."""

    # The key's name in records, metrics and budgets (never the key).
    id: Name
    # Hex sha256 of the key's plaintext (`plumbline` never stores the key itself).
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # client: the /v1 API; admin: /admin routes, /metrics and /console; metrics: /metrics
    # only; console: the web console (/console) only.
    role: Literal["client", "admin", "metrics", "console"] = "client"
    # Public model names this key may use (None: every model).
    models: list[Name] | None = None
    # Budgets per fixed window of `window_s` seconds (None: unlimited).
    requests_per_window: int | None = Field(None, ge=1)
    tokens_per_window: int | None = Field(None, ge=1)
    window_s: float = Field(60.0, gt=0)


class AccessConfig(Frozen):
    keys: list[ApiKey] = Field(default_factory=list)
    # Also accept keys created through the admin API (the store's `keys` table).
    store_keys: bool = False
    # /metrics answers only to admin or metrics keys.
    metrics_requires_key: bool = False
    # Tokens reserved for the answer when a request names no max_tokens (settled after).
    default_reserve_tokens: int = Field(1024, ge=0)
    # Each model alias -> its route (set by the config's cross-check), so a key allowed a route
    # may use it by any of its names.
    _routes: dict[str, str] = PrivateAttr(default_factory=dict)

    def route_of(self, name: str) -> str:
        """The route `name` is an alias of, or `name` itself."""
        return self._routes.get(name, name)

    @property
    def open(self) -> bool:
        """No client key can exist: the /v1 API needs no key (the embedded default)."""
        return not self.store_keys and not any(k.role == "client" for k in self.keys)
