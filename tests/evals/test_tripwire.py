import json

import httpx
import openai
import pytest

from evals.tripwire import (
    PROMPTS,
    Prompt,
    TripwireReport,
    degeneration,
    judge,
    run_tripwire,
    tokens,
)

LOOP = "I think the answer is Paris, the capital of France. " * 8

DEGENERATE = {
    "bangs": "!" * 40,
    "short bangs": "!!!!",
    "number run": "111 222 333 444",
    "long number run": "The result is "
    + " ".join(str(d) * 3 for d in [1, 2, 3, 4, 5, 6, 7, 8, 9] * 3),
    "counting": " ".join(str(n) for n in range(12, 60)),
    "sentence loop": LOOP,
    "word loop": "the " * 80,
    "healthy start then loop": "Paris is the capital of France. " + "and and and so on " * 30,
    "digits glued": "1" * 30,
    "punctuation soup": ". , ; : ? ! ( ) . , ;",
}

HEALTHY = {
    "paris": "The capital of France is Paris.",
    "prose": (
        "The ocean covers most of the surface of our planet and holds almost all of its water. "
        "Its currents carry heat from the tropics towards the poles, shaping the weather on "
        "every continent, while the tides follow the pull of the moon. Scientists still know "
        "more about the surface of Mars than about the deepest trenches of the Pacific, where "
        "strange animals live in complete darkness under enormous pressure."
    ),
    "code": "def double(x):\n    return x * 2\n\n\ndef triple(x):\n    return x * 3\n",
    "table": "| planet | moons |\n|--------|-------|\n| Mars | 2 |\n| Earth | 1 |\n" + "=" * 16,
    "numbered list": "1. Red\n2. Blue\n3. Yellow",
    "years": "Apollo 11 landed in 1969, and the Berlin Wall fell in 1989.",
    "number": "42",
    "phone-like": "Call 555 0100 or 555 0199.",
    "empty": "",
}


@pytest.mark.parametrize("name", DEGENERATE)
def test_detector_catches_planted_collapse(name: str) -> None:
    assert degeneration(DEGENERATE[name]) is not None, name


@pytest.mark.parametrize("name", HEALTHY)
def test_detector_passes_healthy_text(name: str) -> None:
    assert degeneration(HEALTHY[name]) is None, degeneration(HEALTHY[name])


def test_numbers_become_digit_patterns() -> None:
    assert tokens("111 222 123!") == ["#aaa", "#aaa", "#abc", "!"]


def test_twenty_prompts_with_expectations() -> None:
    assert len(PROMPTS) == 20
    assert len({p.text for p in PROMPTS}) == 20
    assert all(p.expected for p in PROMPTS)


def test_expected_substrings_are_matched_as_tokens() -> None:
    spider = next(p for p in PROMPTS if "spider" in p.text)
    assert judge(spider, "A spider has 8 legs.").verdict == "ok"
    assert judge(spider, "A spider has eight legs.").verdict == "ok"
    assert judge(spider, "A spider has 80 legs.").verdict == "wrong"
    freezing = next(p for p in PROMPTS if "freezing" in p.text)
    assert judge(freezing, "It is -18.0 degrees.").verdict == "wrong"
    assert judge(freezing, "It is 0 degrees.").verdict == "ok"
    hello = next(p for p in PROMPTS if "hello" in p.text)
    assert judge(hello, "Hello!").verdict == "wrong"
    assert judge(hello, "HELLO").verdict == "ok"
    merci = next(p for p in PROMPTS if "merci" in p.text)
    assert judge(merci, "Thanks, or thank you.").verdict == "ok"
    assert judge(merci, "Mercy.").verdict == "wrong"


def test_judge_verdicts() -> None:
    p = Prompt("What is the capital of France?", ("paris",))
    assert judge(p, "It is Paris.").verdict == "ok"
    assert judge(p, "It is Lyon.").verdict == "wrong"
    assert judge(p, "Paris " + "111 222 333 444").verdict == "degenerate"
    assert judge(p, "Paris.", reasoning="hmm " * 100).verdict == "degenerate"
    assert judge(p, None, finish_reason="length").verdict == "degenerate"
    assert judge(p, None, finish_reason="stop").verdict == "wrong"


def test_configuration_verdict() -> None:
    p = PROMPTS[0]
    ok = judge(p, "Paris")
    bad = judge(p, "!!!!")
    wrong = judge(p, "Lyon")
    assert TripwireReport((ok,) * 18 + (bad, wrong)).verdict == "ok"
    assert TripwireReport((ok,) * 18 + (bad, bad)).verdict == "degenerate"
    report = TripwireReport((ok,) * 17 + (wrong,) * 3)
    assert report.verdict == "wrong"
    assert report.line() == "wrong (17 ok, 0 degenerate, 3 wrong of 20)"


def _fake_upstream(answer_for) -> openai.AsyncOpenAI:
    """A fake upstream speaking the chat completions wire format."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["temperature"] == 0
        content = answer_for(body["messages"][0]["content"])
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
            },
        )

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return openai.AsyncOpenAI(api_key="x", base_url="http://upstream.test/v1", http_client=http)


async def test_runner_against_a_fake_upstream() -> None:
    by_text = {p.text: p for p in PROMPTS}

    def answer(text: str) -> str:
        prompt = by_text[text]
        if prompt is PROMPTS[0]:
            return "111 222 333 444 555"
        if prompt is PROMPTS[1]:
            return "I do not know."
        return f"Sure: {prompt.expected[0]}."

    client = _fake_upstream(answer)
    report = await run_tripwire(client, "smol")
    assert report.counts == {"ok": 18, "degenerate": 1, "wrong": 1}
    assert report.verdict == "ok"
    collapsed = await run_tripwire(_fake_upstream(lambda t: "!" * 50), "smol")
    assert collapsed.verdict == "degenerate"
    assert collapsed.counts["degenerate"] == 20
