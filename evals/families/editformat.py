"""Edit format: fix a planted bug by replying with SEARCH/REPLACE edit blocks.

What it measures: whether a model can hand back an edit that *applies*, not only whether it
can find the bug. In the published write-up "I Benchmarked Nine Models to Spec a Four-GPU
Node", one model's replies were well-formed edit blocks 62.7% of the time against 96.4% for
another, and that, not coding skill, decided the result. So three
things are scored separately in `Verdict.parts`:

    well_formed      the reply parses under the SEARCH/REPLACE grammar (`evals.editblock`)
    applies          every block applies exactly (SEARCH equals one run of whole lines)
    applies_lenient  every block applies with whitespace tolerance (see `evals.editblock`)
    tests_pass       the edited file passes its tests in the sandbox

The outcome is `malformed` when the reply holds no well-formed block, `wrong` when the edit
does not apply even leniently or the tests fail, `correct` when the tests pass. Tests run on
the leniently applied file, as aider itself would have written it; `applies` (exact) is the
number to compare formats by. An edit to any file other than the module does not apply.

Where the items come from: ten small reference functions with tests (`editformat_tasks.py`), and
three planted bugs each (a flipped comparison, an off-by-one, a wrong constant...), 30 tasks. The
builder shuffles them with the seed. Every task is checked (in the tests of this module) to
pass with the reference and fail with the bug.

Tests run via `evals.sandbox.run_python` (never in this process). The runner appended to the
program prints a per-item sentinel after every test ran, so a module that exits early does not
count as passing.
"""

from __future__ import annotations

import random

from evals import editblock
from evals.families.editformat_tasks import TASKS, Task
from evals.item import Item, Reply, Verdict
from evals.sandbox import Limits, run_python
from gateway.serving.degeneration import reply_degeneration

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
