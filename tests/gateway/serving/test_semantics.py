"""The request's meaning (gateway/serving/semantics.py): read once, hashed, said in words."""

from __future__ import annotations

from gateway.serving.semantics import NEUTRAL, Semantics

HI = [{"role": "user", "content": "hello"}]


def test_a_profiled_route_means_neutral_where_nothing_was_set() -> None:
    meaning = Semantics.of({"messages": HI, "temperature": 0.7}, profiled=True)
    assert {k: getattr(meaning, k) for k in NEUTRAL} == {**NEUTRAL, "temperature": 0.7}
    assert not meaning.defaults
    unprofiled = Semantics.of({"messages": HI, "temperature": 0.7}, profiled=False)
    assert unprofiled.defaults and unprofiled.top_k is None


def test_one_meaning_whatever_the_words() -> None:
    """top_k -1 and 0 are both "off"; repeat_penalty is repetition_penalty; a cap under either
    name; a lone stop string; unset and neutral are the same ask."""
    a = Semantics.of(
        {"top_k": -1, "repeat_penalty": 1.2, "max_completion_tokens": 8, "stop": "x"}, True
    )
    b = Semantics.of(
        {"top_k": 0, "repetition_penalty": 1.2, "max_tokens": 8, "stop": ["x"], "min_p": 0.0},
        True,
    )
    assert a.canonical() == b.canonical() and a.digest() == b.digest()
    assert Semantics.of({"temperature": 1}, True).digest() == Semantics.of({}, True).digest()


def test_the_thinking_switch_is_read_from_any_dialect() -> None:
    vllm = Semantics.of({"chat_template_kwargs": {"enable_thinking": False}}, True)
    router = Semantics.of({"reasoning": {"enabled": False}}, True)
    assert vllm.thinking is router.thinking is False
    assert vllm.digest() == router.digest()
    deepseek = Semantics.of({"chat_template_kwargs": {"thinking": True, "x": 1}}, True)
    assert (deepseek.thinking, deepseek.thinking_key, deepseek.template) == (
        True,
        "thinking",
        (("x", 1),),
    )
    budget = Semantics.of({"thinking_token_budget": 512, "reasoning_effort": "low"}, True)
    assert budget.canonical()["thinking_budget"] == 512
    assert (
        budget.digest()
        == Semantics.of({"reasoning": {"max_tokens": 512, "effort": "low"}}, True).digest()
    )
    assert Semantics.of({"thinking_token_budget": -1}, True).thinking_budget is None  # unlimited


def test_the_hash_names_what_was_not_sent_and_leaves_out_what_is_accepted() -> None:
    meaning = Semantics.of({"top_k": 20}, True)
    told, untold = meaning.digest(), meaning.digest(unsent=["top_k"])
    assert told != untold
    assert meaning.digest(unsent=["top_k"]) == Semantics.of({"top_k": 20}, True).digest(
        unsent=["top_k"]
    )  # two arms that could not be told it alike are at parity with each other
    assert meaning.digest(unsent=["top_k"], accepted=["top_k"]) == meaning.digest(
        accepted=["top_k"]
    )


def test_the_meaning_reads_as_words() -> None:
    body = {
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "chat_template_kwargs": {"enable_thinking": False},
        "stop": ["\n", "。"],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
    }
    said = Semantics.of(body, True).describe()
    assert said.startswith("temperature=0.7, top_p=0.8, top_k=20, min_p=0, ")
    assert "enable_thinking=false" in said and "response_format=json_schema" in said
    assert 'stop=["\\n","\\u3002"]' in said
    assert said.isascii()  # it travels in a response header
