import pytest

from evals.editblock import ApplyError, EditBlock, EditFormatError, apply, parse

SOURCE = """def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value
"""

BLOCK = """Here is the fix.

clamp.py
```python
<<<<<<< SEARCH
    if value > high:
        return high
=======
    if value > high:
        return high + 0
>>>>>>> REPLACE
```
"""


def test_parses_a_fenced_block() -> None:
    [block] = parse(BLOCK)
    assert block == EditBlock(
        "clamp.py",
        "    if value > high:\n        return high",
        "    if value > high:\n        return high + 0",
    )


def test_fences_are_optional_and_paths_are_cleaned() -> None:
    text = (
        "`clamp.py`:\n<<<<<<< SEARCH\n    return value\n=======\n    return low\n>>>>>>> REPLACE\n"
    )
    [block] = parse(text)
    assert block.path == "clamp.py"


def test_later_blocks_reuse_the_path() -> None:
    text = (
        BLOCK
        + "\n```python\n<<<<<<< SEARCH\n    return value\n=======\n"
        + "    return 0\n>>>>>>> REPLACE\n```\n"
    )
    blocks = parse(text)
    assert [b.path for b in blocks] == ["clamp.py", "clamp.py"]


@pytest.mark.parametrize(
    "text",
    [
        "I would change `return high` to `return high + 0`.",  # no block
        BLOCK.replace(">>>>>>> REPLACE", ""),  # unterminated
        BLOCK.replace("=======\n", ""),  # no divider
        BLOCK.replace("clamp.py\n", ""),  # no path
        BLOCK.replace("<<<<<<< SEARCH", "<<<< SEARCH"),  # four markers: not a block
        BLOCK.replace("<<<<<<< SEARCH\n", ""),  # REPLACE with no SEARCH
        BLOCK.replace("=======", "=======\n=======", 1),  # two dividers
        "clamp.py\n```diff\n-    return high\n+    return high + 0\n```",  # a unified diff
    ],
)
def test_malformed(text: str) -> None:
    with pytest.raises(EditFormatError):
        parse(text)


def test_a_setext_heading_is_not_malformed() -> None:
    assert len(parse("Fix\n=======\n\n" + BLOCK)) == 1


def test_exact_apply() -> None:
    out = apply({"clamp.py": SOURCE}, parse(BLOCK), lenient=False)
    assert "return high + 0" in out["clamp.py"]
    assert out["clamp.py"].count("\n") == SOURCE.count("\n")


def test_exact_needs_whole_lines() -> None:
    block = EditBlock("clamp.py", "if value > high:", "if value >= high:")
    with pytest.raises(ApplyError):
        apply({"clamp.py": SOURCE}, [block], lenient=False)


def test_lenient_accepts_a_uniform_indent_shift_and_reindents_the_replacement() -> None:
    block = EditBlock(
        "clamp.py", "if value > high:\n    return high  ", "if value >= high:\n    return high"
    )
    with pytest.raises(ApplyError):
        apply({"clamp.py": SOURCE}, [block], lenient=False)
    out = apply({"clamp.py": SOURCE}, [block], lenient=True)["clamp.py"]
    assert "    if value >= high:\n        return high\n" in out


def test_lenient_does_not_accept_a_changed_relative_indent() -> None:
    block = EditBlock("clamp.py", "    if value > high:\n    return high", "x")
    with pytest.raises(ApplyError):
        apply({"clamp.py": SOURCE}, [block], lenient=True)


def test_ambiguous_or_missing_search_does_not_apply() -> None:
    twice = SOURCE + "    if value > high:\n        return high\n"
    for files, search in [
        ({"clamp.py": twice}, "    if value > high:\n        return high"),
        ({"clamp.py": SOURCE}, "    return maximum"),
        ({"clamp.py": SOURCE}, ""),
    ]:
        with pytest.raises(ApplyError):
            apply(files, [EditBlock("clamp.py", search, "x")], lenient=True)


def test_other_files_do_not_apply() -> None:
    block = EditBlock("test_clamp.py", "    return value", "    return 0")
    with pytest.raises(ApplyError):
        apply({"clamp.py": SOURCE}, [block], lenient=True)
    ok = EditBlock("./clamp.py", "    return value", "    return 0")
    assert "return 0" in apply({"clamp.py": SOURCE}, [ok], lenient=False)["clamp.py"]
