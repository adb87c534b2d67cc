import json

import httpx
import openai

from evals.tripwire import PROMPTS, Prompt, TripwireReport, judge, run_tripwire, table


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
    assert report.line() == "wrong (17 ok, 0 degenerate, 3 wrong, 0 error of 20)"


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
    assert report.counts == {"ok": 18, "degenerate": 1, "wrong": 1, "error": 0}
    assert report.verdict == "ok"
    collapsed = await run_tripwire(_fake_upstream(lambda t: "!" * 50), "smol")
    assert collapsed.verdict == "degenerate"
    assert collapsed.counts["degenerate"] == 20


async def test_a_prompt_without_an_answer_is_an_error_and_the_target_fails() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "Invalid API key."}})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = openai.AsyncOpenAI(
        api_key="x", base_url="http://upstream.test/v1", http_client=http, max_retries=0
    )
    report = await run_tripwire(client, "smol")
    assert report.counts["error"] == 20 and report.verdict == "error" and not report.passed
    assert "HTTP 401: Invalid API key." in report.why()


async def test_the_table_and_json_name_each_prompt_its_verdict_and_why() -> None:
    by_text = {p.text: p for p in PROMPTS}
    report = await run_tripwire(
        _fake_upstream(lambda t: "111 222 333 444 555" if by_text[t] is PROMPTS[0] else "no"),
        "smol",
        max_wrong=None,
    )
    text = table("smol", report)
    assert "TripwireReport(" not in text and "PromptResult(" not in text
    assert PROMPTS[0].text in text and "degenerate" in text and "none of ['42']" in text
    assert text.rstrip().endswith("smol: passed")  # wrong answers only: it passes
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["verdict"] == "ok" and doc["passed"] is True
    assert doc["counts"] == {"ok": 0, "degenerate": 1, "wrong": 19, "error": 0}
    assert doc["prompts"][1] == {
        "prompt": PROMPTS[1].text,
        "verdict": "wrong",
        "why": "none of ['42']",
    }
    strict = TripwireReport(report.results, max_wrong=2)
    assert (
        strict.verdict == "wrong" and "19 of 20 prompts wrong (at most 2 allowed)" in strict.why()
    )
