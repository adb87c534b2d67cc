import json

import httpx
import openai

from evals.tripwire import PROMPTS, Prompt, TripwireReport, judge, run_tripwire


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
