"""What each kind of upstream takes: the extension fields of its request schema, and
`carrier_of`, everything the dialect (gateway/serving/dialect.py) needs to know of one upstream.

`TAKES` is the table gateway/serving/adapt.py strips and refuses by (a field a kind does not take
is stripped and marked, or refused where its loss changes what is asked); an upstream's
`accepts` adds to its kind's row.
"""

from __future__ import annotations

import functools
from typing import Any

from gateway.config import Config, Upstream
from gateway.serving.dialect import Carrier

# Extension fields whose removal changes sampling or templating, not what was asked.
STRIPPABLE = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "top_a",
    "typical_p",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
    "min_tokens",
    "chat_template_kwargs",
    "chat_template",
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "length_penalty",
    "prompt_logprobs",
    "return_tokens_as_token_ids",
    "guided_decoding_backend",
    "guided_whitespace_pattern",
    "mm_processor_kwargs",
    "priority",
    "cache_salt",
)
# Extension fields whose removal would change what the answer is: refused where not taken.
MEANINGFUL = (
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "grammar",
    "stop_token_ids",
    "bad_words",
    "allowed_token_ids",
    "ignore_eos",
    "use_beam_search",
    "truncate_prompt_tokens",
)

_VLLM = frozenset(STRIPPABLE + MEANINGFUL) - {
    "top_a",
    "typical_p",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
    "grammar",
}
# llama-cpp-python's server (llama_cpp/server/types.py): what its request models name and its
# handler passes on (it drops n, min_tokens, logit_bias_type and user; unknown fields are
# ignored). repetition_penalty is said as repeat_penalty there.
_LLAMACPP = frozenset(
    {"top_k", "min_p", "repetition_penalty", "mirostat_mode", "mirostat_tau", "mirostat_eta"}
    | {"grammar"}
)
# OpenRouter's request schema (openrouter.ai/docs/api-reference/parameters).
_OPENROUTER = frozenset({"top_k", "min_p", "repetition_penalty", "top_a"})

# Which extension fields each kind of upstream takes ("openai": any other OpenAI-compatible API,
# OpenAI's own included, which takes none of them).
TAKES: dict[str, frozenset[str]] = {
    "vllm": _VLLM,
    "llamacpp": _LLAMACPP,
    "openrouter": _OPENROUTER,
    "openai": frozenset(),
}
# Kinds that serve one choice per request whatever `n` says.
ONE_CHOICE = frozenset({"llamacpp"})
# Every field `_fit` decides on: a body that names none of them (most do) skips its checks.
EXTENSIONS = frozenset(MEANINGFUL + STRIPPABLE)


def table_of(upstream: Upstream) -> str:
    """The row of `TAKES` an upstream reads from: an `openai` upstream on openrouter.ai, or
    with OpenRouter's `provider` routing, reads OpenRouter's (as `Config.thinking_cap` does)."""
    if upstream.kind == "openai" and (upstream.openrouter or upstream.provider is not None):
        return "openrouter"
    return upstream.kind


def takes(upstream: Upstream) -> frozenset[str]:
    return _takes(table_of(upstream), tuple(upstream.accepts))


@functools.lru_cache(maxsize=256)
def _takes(table: str, accepts: tuple[str, ...]) -> frozenset[str]:
    """A row of `TAKES` and an upstream's `accepts`, united once (not on every attempt)."""
    return TAKES[table] | frozenset(accepts)


_CARRIERS: dict[int, tuple[Upstream, Config | None, Carrier]] = {}


def carrier_of(upstream: Upstream, config: Config | None = None) -> Carrier:
    """What `upstream` can be told (`Carrier`), worked out once per (frozen) upstream and config
    rather than on every attempt; without `config`, no thinking budget and no template variables
    fixed at launch."""
    cached = _CARRIERS.get(id(upstream))
    if cached is not None and cached[0] is upstream and cached[1] is config:
        return cached[2]
    if len(_CARRIERS) >= 256:  # reloaded configs bring new objects: stay bounded
        _CARRIERS.clear()
    carrier = _carrier(upstream, config)
    _CARRIERS[id(upstream)] = (upstream, config, carrier)
    return carrier


def _carrier(upstream: Upstream, config: Config | None) -> Carrier:
    kind = table_of(upstream)
    taken = takes(upstream)
    fixed: dict[str, Any] = {}
    if config is not None and kind == "llamacpp" and "chat_template_kwargs" not in taken:
        # llama-cpp-python takes template variables at launch only (deploy/launch.py).
        profile = config.profiles.get(upstream.profile) if upstream.profile else None
        if profile is not None:
            fixed = dict(profile.chat_template_kwargs)
            if profile.reasoning_effort is not None:
                fixed["reasoning_effort"] = profile.reasoning_effort
    return Carrier(
        upstream=upstream.name,
        kind=kind,
        takes=taken,
        local=upstream.is_local,
        cap=config.thinking_cap(upstream) if config is not None else None,
        fixed={k: v for k, v in fixed.items() if v is not None},
        require=upstream.provider.require_parameters if upstream.provider is not None else None,
    )


def capability_markdown() -> str:
    """`TAKES` as README Markdown: each extension field, and which kinds take it."""
    kinds = list(TAKES)
    rows = ["| field | " + " | ".join(kinds) + " | not taken |", "|---" * (len(kinds) + 2) + "|"]
    for name in (*STRIPPABLE, *MEANINGFUL):
        marks = " | ".join("yes" if name in TAKES[k] else "" for k in kinds)
        action = "stripped, marked" if name in STRIPPABLE else "refused / routed past"
        rows.append(f"| `{name}` | {marks} | {action} |")
    return "\n".join(rows)
