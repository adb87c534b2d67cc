"""The eval lane's credential: the key the gateway's own eval rounds present to it.

A scheduled round (gateway/trust/schedule.py) is a client of the gateway, through the same door
users use; where `[access]` asks /v1 for a key, the round needs one too. It is not a client key:

- it is made at start (`new_key`, 256 random bits), or read from the environment variable
  `[evals].lane_key_env` names (for `plumbline eval run --config` from outside, or gateways that
  must share one); `plumbline serve --workers` makes one for all its workers;
- only its sha256 is compared (`hmac.compare_digest`), as for every key;
- it opens /v1 only to requests that carry the eval-lane marker (`x-plumbline-lane: eval`); on
  any other request, and on every other path, it is refused (`gateway.edge.guard`);
- it has no budget and every model (a round evaluates every target), and records carry its id,
  `eval-lane`, never the key. Its plaintext is handed to the scheduler's client and nothing else:
  this object's repr, and the run spec's, never show it.
"""

from __future__ import annotations

import hmac
import logging

from gateway.config import Config
from gateway.edge.access import LANE_KEY as LANE_KEY
from gateway.edge.access import hash_key, new_key

log = logging.getLogger("plumbline.access")

LANE_ROLE = LANE_KEY.role
LANE_HEADER = b"x-plumbline-lane"
LANE_VALUE = b"eval"


class LaneCredential:
    """The eval lane's key: its digest for the guard, its plaintext for the scheduler."""

    __slots__ = ("_plaintext", "digest", "source")

    def __init__(self, plaintext: str, source: str):
        self._plaintext = plaintext
        self.digest = hash_key(plaintext)
        self.source = source  # "configured" | "made at start"

    @classmethod
    def from_config(cls, config: Config) -> LaneCredential:
        said = config.evals.lane_key()
        if said is not None:
            return cls(said, "configured")
        if config.evals.lane_key_env is not None:
            log.warning(
                "evals.lane_key_env names %s, which is not set: the eval lane uses a key made "
                "at start, which only this gateway's own rounds know",
                config.evals.lane_key_env,
            )
        return cls(new_key(), "made at start")

    def matches(self, digest: str) -> bool:
        return hmac.compare_digest(self.digest, digest)

    def reveal(self) -> str:
        """The plaintext, for the client of the gateway's own eval rounds only."""
        return self._plaintext

    def __repr__(self) -> str:
        return f"LaneCredential({self.source})"


def on_eval_lane(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request (ASGI raw headers) carries the eval-lane marker."""
    return any(name.lower() == LANE_HEADER and value == LANE_VALUE for name, value in headers)
