"""Edit format: fix a planted bug by replying with SEARCH/REPLACE edit blocks.

What it measures: whether a model can hand back an edit that *applies*, not only whether it
can find the bug. Reference 000: the same benchmark gave one model 62.7% well-formed edit
blocks against 96.4% for another, and that, not coding skill, decided the result. So three
things are scored separately in `Verdict.parts`:

    well_formed      the reply parses under the SEARCH/REPLACE grammar (`evals.editblock`)
    applies          every block applies exactly (SEARCH equals one run of whole lines)
    applies_lenient  every block applies with whitespace tolerance (see `evals.editblock`)
    tests_pass       the edited file passes its tests in the sandbox

The outcome is `malformed` when the reply holds no well-formed block, `wrong` when the edit
does not apply even leniently or the tests fail, `correct` when the tests pass. Tests run on
the leniently applied file, as aider itself would have written it; `applies` (exact) is the
number to compare formats by. An edit to any file other than the module does not apply.

Where the items come from: ten small reference functions with tests, written here, and three
planted bugs each (a flipped comparison, an off-by-one, a wrong constant...), 30 tasks. The
builder shuffles them with the seed. Every task is checked (in the tests of this module) to
pass with the reference and fail with the bug.

Tests run via `evals.sandbox.run_python` (never in this process). The runner appended to the
program prints a per-item sentinel after every test ran, so a module that exits early does not
count as passing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evals import editblock
from evals.item import Item, Reply, Verdict
from evals.sandbox import Limits, run_python
from evals.tripwire import reply_degeneration

NAME = "editformat"
PARTS = ("well_formed", "applies", "applies_lenient", "tests_pass")
DEFAULT_N = 30

PROMPT = """The file `{module}.py` below has a bug: the tests in `test_{module}.py` fail.

{module}.py
```python
{source}```

test_{module}.py
```python
{tests}```

Fix the bug in `{module}.py` without changing the tests. Reply with one or more \
SEARCH/REPLACE edit blocks in exactly this format:

{module}.py
```python
<<<<<<< SEARCH
the exact lines of the current file to replace
=======
the lines to put in their place
>>>>>>> REPLACE
```

The SEARCH part must match the existing file exactly, including indentation."""

RUNNER = """

import sys as _sys
import traceback as _traceback
_tests = [f for n, f in list(globals().items()) if n.startswith("test_") and callable(f)]
_failed = 0
for _test in _tests:
    try:
        _test()
    except Exception:
        _failed += 1
        _traceback.print_exc()
if _failed:
    _sys.exit(1)
print("{sentinel}", len(_tests))
"""

TEST_LIMITS = Limits(cpu_seconds=5, wall_seconds=15.0)


@dataclass(frozen=True, slots=True)
class Task:
    module: str
    source: str
    tests: str
    bugs: tuple[tuple[str, str], ...]  # (text in source, replacement): each plants one bug


TASKS: tuple[Task, ...] = (
    Task(
        "clamp",
        '''def clamp(value, low, high):
    """Limit value to the closed range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
''',
        """from clamp import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_edges():
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(0, 0, 10) == 0
""",
        (
            ("value < low", "value > low"),
            ("return high", "return low"),
            ("return value", "return low"),
        ),
    ),
    Task(
        "vowels",
        '''def count_vowels(text):
    """Count the vowels a, e, i, o, u in text, ignoring case."""
    return sum(1 for ch in text.lower() if ch in "aeiou")
''',
        """from vowels import count_vowels


def test_count():
    assert count_vowels("Education") == 5
    assert count_vowels("rhythm") == 0
    assert count_vowels("AUDIO") == 4
""",
        (('"aeiou"', '"aeio"'), ("text.lower()", "text"), ("if ch in", "if ch not in")),
    ),
    Task(
        "fizzbuzz",
        '''def fizzbuzz(n):
    """The FizzBuzz words for 1..n inclusive."""
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out
''',
        """from fizzbuzz import fizzbuzz


def test_fizzbuzz():
    got = fizzbuzz(15)
    assert len(got) == 15
    assert got[:5] == ["1", "2", "Fizz", "4", "Buzz"]
    assert got[9] == "Buzz"
    assert got[14] == "FizzBuzz"
""",
        (
            ("range(1, n + 1)", "range(1, n)"),
            ("i % 15 == 0", "i % 10 == 0"),
            ('"Buzz")', '"Fizz")'),
        ),
    ),
    Task(
        "search",
        '''def binary_search(items, target):
    """Index of target in the sorted list items, or -1 when it is absent."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
''',
        """from search import binary_search


def test_found():
    items = [1, 3, 5, 7, 9, 11]
    for i, x in enumerate(items):
        assert binary_search(items, x) == i


def test_absent():
    assert binary_search([1, 3, 5], 4) == -1
    assert binary_search([], 1) == -1
""",
        (
            ("while lo <= hi", "while lo < hi"),
            ("len(items) - 1", "len(items) - 2"),
            ("return -1", "return 0"),
        ),
    ),
    Task(
        "leap",
        '''def is_leap_year(year):
    """Whether year is a leap year in the Gregorian calendar."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
''',
        """from leap import is_leap_year


def test_leap():
    assert is_leap_year(2024)
    assert is_leap_year(2000)
    assert not is_leap_year(1900)
    assert not is_leap_year(2200)
    assert not is_leap_year(2023)
""",
        (
            ("year % 400", "year % 200"),
            ("year % 100 != 0", "year % 100 == 0"),
            ("== 0 and", "== 0 or"),
        ),
    ),
    Task(
        "median",
        '''def median(values):
    """The median of a non-empty list of numbers."""
    ordered = sorted(values)
    n = len(ordered)
    if n % 2 == 1:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2
''',
        """from median import median


def test_odd():
    assert median([3, 1, 2]) == 2


def test_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([1, 2]) == 1.5
""",
        (("sorted(values)", "list(values)"), (") / 2", ") // 2"), ("n % 2 == 1", "n % 2 == 0")),
    ),
    Task(
        "chunks",
        '''def chunk(items, size):
    """Split items into consecutive lists of length size (the last may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]
''',
        """from chunks import chunk


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([1, 2, 3], 3) == [[1, 2, 3]]
    assert chunk([], 4) == []
""",
        (
            ("i + size]", "i + size - 1]"),
            ("range(0, len(items), size)", "range(0, len(items) - 1, size)"),
            ("range(0,", "range(1,"),
        ),
    ),
    Task(
        "roman",
        '''NUMERALS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]


def to_roman(number):
    """The Roman numeral for 1 <= number <= 3999."""
    out = []
    for value, letters in NUMERALS:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)
''',
        """from roman import to_roman


def test_roman():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3888) == "MMMDCCCLXXXVIII"
""",
        (
            ('(900, "CM")', '(900, "DM")'),
            ("number >= value", "number > value"),
            ('(4, "IV")', '(4, "IIII")'),
        ),
    ),
    Task(
        "caesar",
        '''def caesar(text, shift):
    """Shift letters by shift places, keeping case; other characters are unchanged."""
    out = []
    for ch in text:
        if ch.isalpha():
            base = ord("A") if ch.isupper() else ord("a")
            out.append(chr((ord(ch) - base + shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)
''',
        """from caesar import caesar


def test_caesar():
    assert caesar("abc", 1) == "bcd"
    assert caesar("Hello, World!", 3) == "Khoor, Zruog!"
    assert caesar("xyz", 3) == "abc"
""",
        (("% 26", "% 25"), ('ord("A") if', 'ord("a") if'), ("out.append(ch)", "pass")),
    ),
    Task(
        "flatten",
        '''def flatten(nested):
    """All non-list elements of arbitrarily nested lists, in order."""
    result = []
    for x in nested:
        if isinstance(x, list):
            result.extend(flatten(x))
        else:
            result.append(x)
    return result
''',
        """from flatten import flatten


def test_flatten():
    assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]
    assert flatten([[], [[]], 6]) == [6]
    assert flatten(["a", ["b"]]) == ["a", "b"]
""",
        (
            ("isinstance(x, list)", "isinstance(x, tuple)"),
            ("result.extend(flatten(x))", "result.append(flatten(x))"),
            ("result.append(x)", "result.insert(0, x)"),
        ),
    ),
)


def buggy_source(task: Task, bug: int) -> str:
    old, new = task.bugs[bug]
    if task.source.count(old) != 1:
        raise ValueError(f"{task.module}: bug text {old!r} must occur exactly once")
    return task.source.replace(old, new, 1)


def test_program(module_source: str, task: Task, sentinel: str) -> str:
    """The program the sandbox runs: the module, its tests (import line dropped), a runner."""
    tests = "\n".join(
        line for line in task.tests.splitlines() if not line.startswith(f"from {task.module} ")
    )
    return f"{module_source}\n\n{tests}\n{RUNNER.format(sentinel=sentinel)}"


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` tasks (of the 30) in a seeded order; past 30 the order repeats with new ids."""
    rng = random.Random(f"editformat:{seed}")
    pairs = [(t, b) for t in TASKS for b in range(len(t.bugs))]
    rng.shuffle(pairs)
    items = []
    for k in range(n):
        task, bug = pairs[k % len(pairs)]
        source = buggy_source(task, bug)
        items.append(
            Item(
                id=f"editformat-{k:03d}-{task.module}-{bug}",
                family=NAME,
                messages=(
                    {
                        "role": "user",
                        "content": PROMPT.format(
                            module=task.module, source=source, tests=task.tests
                        ),
                    },
                ),
                answer={
                    "module": task.module,
                    "bug": bug,
                    "source": source,
                    "sentinel": f"ALL-TESTS-RAN-{rng.getrandbits(64):016x}",
                },
                scorer="editformat",
                meta={"seed": seed, "task": task.module, "bug": bug},
            )
        )
    return items


def _task(module: str) -> Task:
    return next(t for t in TASKS if t.module == module)


def score(item: Item, reply: Reply) -> Verdict:
    found = reply_degeneration(reply.content, reply.reasoning)
    if found:
        return Verdict("degenerate", f"{found.rule}: {found.detail}")
    text = reply.answer_text()
    if text is None:
        return Verdict("unparsed", "no answer (empty, or an unterminated <think>)")
    parts = dict.fromkeys(PARTS, False)
    try:
        blocks = editblock.parse(text)
    except editblock.EditFormatError as exc:
        return Verdict("malformed", str(exc), parts=parts)
    parts["well_formed"] = True
    path = f"{item.answer['module']}.py"
    files = {path: item.answer["source"]}
    try:
        edited = editblock.apply(files, blocks, lenient=False)
        parts["applies"] = parts["applies_lenient"] = True
    except editblock.ApplyError:
        try:
            edited = editblock.apply(files, blocks, lenient=True)
            parts["applies_lenient"] = True
        except editblock.ApplyError as exc:
            return Verdict("wrong", f"does not apply: {exc}", parts=parts)
    sentinel = item.answer["sentinel"]
    program = test_program(edited[path], _task(item.answer["module"]), sentinel)
    result = run_python(program, TEST_LIMITS)
    parts["tests_pass"] = result.passed and sentinel in result.stdout
    if parts["tests_pass"]:
        return Verdict("correct", "", parts=parts)
    return Verdict("wrong", f"tests {result.status}: {result.stderr[-300:]}", parts=parts)


SCORERS = {"editformat": score}
