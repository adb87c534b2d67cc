import difflib

import pytest

from evals.families import editformat
from evals.item import Item, Reply
from evals.sandbox import run_python

ITEMS = editformat.build(0)


def fix_block(item: Item, indent_shift: int = 0, path: str | None = None) -> str:
    """The SEARCH/REPLACE block that undoes the planted bug (built from the diff)."""
    task = next(t for t in editformat.TASKS if t.module == item.answer["module"])
    buggy, good = item.answer["source"].splitlines(), task.source.splitlines()
    matcher = difflib.SequenceMatcher(a=buggy, b=good)
    [(_, i1, i2, j1, j2)] = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    shift = (lambda s: s[indent_shift:]) if indent_shift else (lambda s: s)
    search = "\n".join(shift(x) for x in buggy[i1:i2])
    replace = "\n".join(shift(x) for x in good[j1:j2])
    name = path or f"{task.module}.py"
    return (
        f"{name}\n```python\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"
    )


def test_builder_is_seeded_and_covers_every_task() -> None:
    assert len(ITEMS) == 30
    assert {(i.answer["module"], i.answer["bug"]) for i in ITEMS} == {
        (t.module, b) for t in editformat.TASKS for b in range(3)
    }
    assert [i.digest() for i in editformat.build(0)] == [i.digest() for i in ITEMS]
    assert [i.id for i in editformat.build(1)] != [i.id for i in ITEMS]


def test_every_reference_passes_and_every_planted_bug_fails() -> None:
    for task in editformat.TASKS:
        assert run_python(
            editformat.test_program(task.source, task, "OK"), editformat.TEST_LIMITS
        ).passed, task.module
        for bug in range(len(task.bugs)):
            program = editformat.test_program(editformat.buggy_source(task, bug), task, "OK")
            assert not run_python(program, editformat.TEST_LIMITS).passed, (task.module, bug)


def test_a_correct_block_scores_correct_with_every_part() -> None:
    item = ITEMS[0]
    verdict = editformat.score(item, Reply("Found it.\n\n" + fix_block(item)))
    assert verdict.outcome == "correct", verdict.detail
    assert verdict.parts == {
        "well_formed": True,
        "applies": True,
        "applies_lenient": True,
        "tests_pass": True,
    }


def test_whitespace_drift_applies_only_leniently() -> None:
    item = next(i for i in ITEMS if i.answer["module"] == "fizzbuzz" and i.answer["bug"] == 0)
    verdict = editformat.score(item, Reply(fix_block(item, indent_shift=4)))
    assert verdict.outcome == "correct", verdict.detail
    assert verdict.parts["applies"] is False and verdict.parts["applies_lenient"] is True


def test_a_block_that_applies_but_does_not_fix_is_wrong() -> None:
    item = ITEMS[1]
    first = item.answer["source"].splitlines()[0]
    block = (
        f"{item.answer['module']}.py\n<<<<<<< SEARCH\n{first}\n=======\n{first}\n>>>>>>> REPLACE\n"
    )
    verdict = editformat.score(item, Reply(block))
    assert verdict.outcome == "wrong"
    assert verdict.parts == {
        "well_formed": True,
        "applies": True,
        "applies_lenient": True,
        "tests_pass": False,
    }


def test_exiting_early_is_not_passing() -> None:
    item = ITEMS[2]
    first = item.answer["source"].splitlines()[0]
    block = (
        f"{item.answer['module']}.py\n<<<<<<< SEARCH\n{first}\n=======\n"
        f"import sys\nsys.exit(0)\n{first}\n>>>>>>> REPLACE\n"
    )
    verdict = editformat.score(item, Reply(block))
    assert verdict.outcome == "wrong" and not verdict.parts["tests_pass"]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b.replace(">>>>>>> REPLACE", ""),
        lambda b: b.replace("=======\n", ""),
        lambda b: b.replace("<<<<<<< SEARCH", "<<<< SEARCH"),
        lambda b: "I would fix the comparison on line 4.",
    ],
)
def test_malformed_is_not_wrong(mangle) -> None:
    item = ITEMS[0]
    verdict = editformat.score(item, Reply(mangle(fix_block(item))))
    assert verdict.outcome == "malformed"
    assert verdict.parts["well_formed"] is False


def test_editing_the_tests_does_not_apply() -> None:
    item = ITEMS[0]
    verdict = editformat.score(
        item, Reply(fix_block(item, path=f"test_{item.answer['module']}.py"))
    )
    assert verdict.outcome == "wrong" and verdict.parts["applies_lenient"] is False


def test_reasoning_is_not_the_answer() -> None:
    item = ITEMS[0]
    assert (
        editformat.score(item, Reply("Let me think.", reasoning=fix_block(item))).outcome
        == "malformed"
    )
    assert editformat.score(item, Reply("<think>" + fix_block(item))).outcome == "unparsed"
    assert editformat.score(item, Reply("hmm</think>" + fix_block(item))).outcome == "correct"


def test_degenerate_reply() -> None:
    assert editformat.score(ITEMS[0], Reply("!" * 100)).outcome == "degenerate"
