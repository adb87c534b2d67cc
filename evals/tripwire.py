"""The corruption tripwire: 20 fixed prompts, a repetition detector and expected substrings.

Run on every configuration before anything else is measured. Each prompt goes through the
model's own chat template (the chat endpoint) and gets one of three verdicts:

    degenerate   the reply (answer or reasoning) trips the repetition detector, or is empty
                 and stopped on length
    wrong        no expected substring in the answer
    ok           an expected substring is there
    error        no answer came (the gateway or the upstream refused or failed): the target
                 cannot be vouched for

The detector (`degeneration`) looks for collapse, not for bad answers; its rules are in
`gateway/serving/degeneration.py` (the watchdog reads it on live answers too).

A configuration is `degenerate` when more than `max_degenerate` prompts are, else `error` when
any prompt got no answer, else `wrong` when more than `max_wrong` are (never, with `max_wrong`
None), else `ok`; it passes only as `ok`. The defaults (1 and 2) are for capable models; a very
small model answers many prompts wrongly while healthy, so judge it against its own reference
configuration rather than the defaults — the tripwire's job is the degenerate count. Before a
scheduled round, `plumbline eval run` and `plumbline bench` (`tripwire_targets`) `max_wrong` is
None unless configured: only collapse and silence keep a target from being scored or benched.

`table` renders a report per target (prompt, verdict, why) for `plumbline eval tripwire`;
`TripwireReport.to_dict` is its JSON (`--json`, run.json, the store's `tripwire_verdicts`).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evals.section import Section
from gateway.serving.degeneration import degeneration

Verdict = Literal["ok", "degenerate", "wrong", "error"]
VERDICTS: tuple[Verdict, ...] = ("ok", "degenerate", "wrong", "error")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A tripwire prompt; the answer passes if it contains any of `expected` (see `contains`)."""

    text: str
    expected: tuple[str, ...]
    case_sensitive: bool = False


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


def contains(answer: str, expected: str, case_sensitive: bool = False) -> bool:
    """Whether `answer` holds `expected`: a number must be a whole number token ("8" is not
    in "80" or "-18.0"); a word or phrase must start at a word boundary ("thank" is in
    "thanks"). Case-folded unless `case_sensitive`."""
    if _NUMBER.fullmatch(expected):
        return expected in _NUMBER.findall(answer)
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.search(rf"(?<!\w){re.escape(expected)}", answer, flags) is not None


PROMPTS: tuple[Prompt, ...] = (
    Prompt("What is the capital of France? Answer in one word.", ("paris",)),
    Prompt("What is 12 + 30? Reply with the number only.", ("42",)),
    Prompt("How many legs does a spider have?", ("8", "eight")),
    Prompt("Which planet is the largest in our solar system?", ("jupiter",)),
    Prompt("What colour is a clear daytime sky?", ("blue",)),
    Prompt("Who wrote the play Romeo and Juliet?", ("shakespeare",)),
    Prompt("What is the chemical formula of water?", ("h2o", "h₂o")),
    Prompt("What is the opposite of the word 'hot'?", ("cold",)),
    Prompt("How many days are there in a week?", ("7", "seven")),
    Prompt("Continue the sequence: one, two, three, ...", ("four",)),
    Prompt("What is the square root of 81?", ("9", "nine")),
    Prompt("Translate the French word 'merci' into English.", ("thank",)),
    Prompt("What gas do plants absorb from the air for photosynthesis?", ("carbon dioxide", "co2")),
    Prompt("Write the word 'hello' in capital letters.", ("HELLO",), case_sensitive=True),
    Prompt("Name the animal that says 'moo'.", ("cow",)),
    Prompt("What is the freezing point of water in degrees Celsius?", ("0", "zero")),
    Prompt(
        "Write a Python function named double that returns its argument times two.", ("def double",)
    ),
    Prompt("In which continent is Kenya?", ("africa",)),
    Prompt("Write two sentences about the ocean.", ("ocean", "sea")),
    Prompt("What is 7 times 8?", ("56",)),
)


@dataclass(frozen=True, slots=True)
class PromptResult:
    prompt: Prompt
    verdict: Verdict
    detail: str = ""
    content: str | None = None


def judge(
    prompt: Prompt,
    content: str | None,
    reasoning: str | None = None,
    finish_reason: str | None = None,
) -> PromptResult:
    """The verdict for one reply to one tripwire prompt (pure)."""
    for text in (content, reasoning):
        found = degeneration(text)
        if found:
            return PromptResult(prompt, "degenerate", f"{found.rule}: {found.detail}", content)
    if not content and finish_reason == "length":
        return PromptResult(prompt, "degenerate", "empty answer, stopped on length", content)
    if any(contains(content or "", exp, prompt.case_sensitive) for exp in prompt.expected):
        return PromptResult(prompt, "ok", "", content)
    return PromptResult(prompt, "wrong", f"none of {list(prompt.expected)}", content)


@dataclass(frozen=True, slots=True)
class TripwireReport:
    results: tuple[PromptResult, ...]
    max_degenerate: int = 1
    max_wrong: int | None = 2
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        counts = Counter(r.verdict for r in self.results)
        object.__setattr__(self, "counts", {v: counts[v] for v in VERDICTS})

    @property
    def verdict(self) -> Verdict:
        if self.counts["degenerate"] > self.max_degenerate:
            return "degenerate"
        if self.counts["error"]:
            return "error"
        if self.max_wrong is not None and self.counts["wrong"] > self.max_wrong:
            return "wrong"
        return "ok"

    @property
    def passed(self) -> bool:
        return self.verdict == "ok"

    def line(self) -> str:
        c = self.counts
        return (
            f"{self.verdict} ({c['ok']} ok, {c['degenerate']} degenerate, "
            f"{c['wrong']} wrong, {c['error']} error of {len(self.results)})"
        )

    def why(self) -> str:
        """Why the verdict, in a sentence: the counts against their limits, and the first
        prompt of the deciding kind with its reason."""
        verdict, c = self.verdict, self.counts
        limits = {"degenerate": self.max_degenerate, "wrong": self.max_wrong, "error": 0}
        if verdict == "ok":
            return self.line()
        first = next(r for r in self.results if r.verdict == verdict)
        return (
            f"{c[verdict]} of {len(self.results)} prompts {verdict} (at most {limits[verdict]} "
            f"allowed); first: {first.prompt.text!r}: {first.detail}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "passed": self.passed,
            "why": self.why(),
            "counts": dict(self.counts),
            "max_degenerate": self.max_degenerate,
            "max_wrong": self.max_wrong,
            "prompts": [
                {"prompt": r.prompt.text, "verdict": r.verdict, "why": r.detail}
                for r in self.results
            ],
        }


def _reasoning_of(message: Any) -> str | None:
    """vLLM renamed `reasoning_content` to `reasoning`; read both."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if value is None:
            value = (getattr(message, "model_extra", None) or {}).get(name)
        if value:
            return str(value)
    return None


async def run_tripwire(
    client: Any,
    model: str,
    *,
    prompts: Sequence[Prompt] = PROMPTS,
    max_tokens: int = 512,
    temperature: float | None = 0.0,
    concurrency: int = 4,
    max_degenerate: int = 1,
    max_wrong: int | None = 2,
    extra_body: dict[str, Any] | None = None,
    extra_headers: dict[str, str] | None = None,
) -> TripwireReport:
    """Send every prompt through `client` (an `openai.AsyncOpenAI`) and judge the replies. A
    prompt the client gets no answer to (after its own retries) is an `error`, with why.

    `temperature=None` leaves sampling to the target's profile (the gateway fills it in).
    """
    import openai

    gate = asyncio.Semaphore(concurrency)
    sampling: dict[str, Any] = {} if temperature is None else {"temperature": temperature}

    async def one(prompt: Prompt) -> PromptResult:
        try:
            async with gate:
                resp = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": prompt.text}],
                    max_tokens=max_tokens,
                    extra_body=extra_body,
                    extra_headers=extra_headers,
                    **sampling,
                )
        except openai.APIStatusError as e:
            return PromptResult(prompt, "error", f"HTTP {e.status_code}: {_said(e)}"[:300])
        except openai.APIError as e:
            return PromptResult(prompt, "error", f"{type(e).__name__}: {e}"[:300])
        if not resp.choices:
            return PromptResult(prompt, "error", "an answer without choices")
        choice = resp.choices[0]
        message = choice.message
        return judge(prompt, message.content, _reasoning_of(message), choice.finish_reason)

    results = await asyncio.gather(*(one(p) for p in prompts))
    return TripwireReport(tuple(results), max_degenerate=max_degenerate, max_wrong=max_wrong)


def _said(e: Any) -> str:
    body = e.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(e.message)


@dataclass(frozen=True, slots=True)
class Target:
    """What the tripwire asks: a `label` (how the run names the target), the `model` sent, and
    headers (an eval-lane pin of one upstream)."""

    label: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)


async def tripwire_targets(
    client: Any,
    targets: Sequence[Target],
    *,
    max_tokens: int = 256,
    max_wrong: int | None = None,
    max_degenerate: int = 1,
    concurrency: int = 4,
) -> dict[str, TripwireReport]:
    """The tripwire on each target (one after another, each `concurrency` prompts at a time),
    sampling left to the target's profile: label -> report."""
    out: dict[str, TripwireReport] = {}
    for t in targets:
        out[t.label] = await run_tripwire(
            client,
            t.model,
            max_tokens=max_tokens,
            temperature=None,
            concurrency=concurrency,
            max_wrong=max_wrong,
            max_degenerate=max_degenerate,
            extra_headers=t.headers or None,
        )
    return out


async def tripwire_at(
    base_url: str,
    api_key: str,
    targets: Sequence[Target],
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    **kw: Any,
) -> dict[str, TripwireReport]:
    """`tripwire_targets` through a fresh client of the OpenAI API at `base_url` (its own
    retries on 429, 5xx and lost connections), closed after."""
    import openai

    def made() -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=2,
            timeout=openai.Timeout(timeout_s, connect=10.0),
            default_headers=dict(headers or {}),
        )
        _ = client.chat.completions  # the package imports a resource's modules where first named
        return client

    # Made in a thread: a client loads the TLS trust store (about 20 ms), and a gateway runs
    # this on the loop that serves its requests.
    client = await asyncio.to_thread(made)
    try:
        return await tripwire_targets(client, targets, **kw)
    finally:
        await client.close()


def table(label: str, report: TripwireReport, width: int = 160) -> str:
    """One target's report as a text table: each prompt, its verdict and why, then the
    verdict line."""
    import io

    from rich.console import Console
    from rich.table import Table

    grid = Table(title=f"{label}: {report.line()}", title_justify="left")
    for name in ("#", "prompt", "verdict", "why"):
        grid.add_column(name, justify="right" if name == "#" else "left", overflow="fold")
    for i, r in enumerate(report.results, 1):
        grid.add_row(str(i), r.prompt.text, r.verdict, r.detail or "–")
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(grid)
    verdict = "passed" if report.passed else f"FAILED: {report.why()}"
    console.print(f"{label}: {verdict}")
    return console.file.getvalue()  # type: ignore[attr-defined]


def section(verdicts: Mapping[str, Mapping[str, Any]]) -> Section:
    """The eval report's tripwire section: each target's verdict (`TripwireReport.to_dict`)
    before it was scored; a target that failed has no scores in the report."""
    rows = []
    for label, v in verdicts.items():
        c = v.get("counts", {})
        rows.append(
            (
                label,
                str(v["verdict"]),
                "yes" if v["passed"] else "no: not scored",
                *(str(c.get(k, 0)) for k in VERDICTS),
                str(v.get("why", "")),
            )
        )
    return Section(
        "Tripwire before scoring",
        ("target", "verdict", "scored", *VERDICTS, "why"),
        tuple(rows),
        (
            "20 fixed prompts per target (evals/tripwire.py); a degenerate or silent target is not "
            "scored.",
        ),
    )
