"""The field policy of the OpenAI doors, /v1/chat/completions and /v1/completions.

These doors speak the upstreams' own API, so almost every field is honoured by passing it
through: `gateway/edge/doors/openai/protocol.py` validates what must be right and lets every
other field by, and an unknown field reaches the upstream untouched (new upstream features need
no gateway release). What the gateway itself does with a field is written here, one row a field, and
rendered into the README (a test keeps the two equal). Per upstream, at dispatch,
`gateway/serving/adapt.py` strips and marks the extension fields an upstream does not take, refuses
(or
routes past) those whose loss would change the answer, and clamps a cap to the window.
"""

from __future__ import annotations

from gateway.edge.doors.policy import Action, Rule, table
from gateway.serving.adapt import MEANINGFUL, STRIPPABLE

H, T, N, D = Action.HONOUR, Action.TRANSLATE, Action.INERT, Action.DROP

_CAP = (
    "clamped to what fits beside the prompt in the chosen upstream's window, marked "
    "(`x-plumbline-clamped`); never added"
)
_SAMPLED = "the profile fills it when unset; local engines get it written out (parity)"
_EXTENSION = "where the upstream takes it; else stripped and marked (`x-plumbline-dropped`)"
_GUIDED = "vLLM; where not taken, the next candidate, else a 400 naming field and upstream"

_COMMON = (
    Rule("model", T, "the route, or an alias of it; the upstream is sent its own model id"),
    Rule("stream", H, ""),
    Rule("stream_options", H, "usage is always asked of the upstream, stripped unless asked"),
    Rule("max_tokens", H, _CAP),
    Rule("temperature", H, _SAMPLED),
    Rule("top_p", H, _SAMPLED),
    Rule("presence_penalty", H, _SAMPLED),
    Rule("frequency_penalty", H, _SAMPLED),
    Rule("seed", H, "the profile fills it when unset"),
    Rule("stop", H, ""),
    Rule("n", H, "llama.cpp answers one choice: the next candidate, else a 400"),
    Rule("logit_bias", H, ""),
    Rule("user", H, ""),
    Rule("top_k", H, f"{_SAMPLED}; {_EXTENSION}"),
    Rule("min_p", H, f"{_SAMPLED}; {_EXTENSION}"),
    Rule("repetition_penalty", H, f"{_SAMPLED}; `repeat_penalty` on llama.cpp; {_EXTENSION}"),
    Rule("repeat_penalty", T, "llama.cpp's name: read as `repetition_penalty`"),
    Rule("thinking_token_budget", T, "said in each upstream's dialect, or logged as unenforced"),
    Rule("other vLLM sampling extensions", H, f"{_EXTENSION} (table below)"),
    Rule("guided_* / structured_outputs / grammar", H, _GUIDED),
    Rule("any other field", H, "passed through as it is"),
)

CHAT_POLICY = table(
    *_COMMON,
    Rule("messages", H, ""),
    Rule("max_completion_tokens", H, f"{_CAP}; `max_tokens` on llama.cpp"),
    Rule("logprobs", H, ""),
    Rule("top_logprobs", H, ""),
    Rule("tools", H, ""),
    Rule("tool_choice", H, ""),
    Rule("parallel_tool_calls", H, ""),
    Rule(
        "response_format",
        H,
        "json_schema on llama.cpp: its `json_object` + `schema` (grammar-enforced)",
    ),
    Rule("reasoning_effort", H, "the profile fills it when unset"),
    Rule("chat_template_kwargs", H, f"merged over the profile's; {_EXTENSION}"),
)

COMPLETIONS_POLICY = table(
    *_COMMON,
    Rule("prompt", H, "a string, strings, or token ids"),
    Rule("echo", H, ""),
    Rule("suffix", H, ""),
    Rule("best_of", H, ""),
    Rule("logprobs", H, ""),
)

# The extension fields `adapt` knows, each in one of its two classes.
EXTENSIONS = (*STRIPPABLE, *MEANINGFUL)
