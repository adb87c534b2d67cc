"""SEARCH/REPLACE edit blocks (aider's edit format): parse them, and apply them to files.

The grammar, one block::

    path/to/file.py
    ```python
    <<<<<<< SEARCH
    lines to find
    =======
    lines to put instead
    >>>>>>> REPLACE
    ```

Marker lines are 5 to 9 of the marker character followed by the keyword (`SEARCH`, nothing,
`REPLACE`), alone on the line apart from trailing whitespace. The path is the last non-blank
line before the block's opening fence (or before `<<<<<<< SEARCH` when there is no fence),
stripped of backticks, `#`, `*` and a trailing colon; a later block with no path line of its
own reuses the previous block's path. Fences are optional, as they are for aider.

Malformed (`EditFormatError`): no block at all; a SEARCH with no divider or no REPLACE; a
REPLACE marker outside a block; a first block with no path. A lone `=======` outside a block is
prose (a setext heading underline), not an error.

Applying (`apply`). Decision, documented here because the scores depend on it:

- *exact*: the SEARCH lines (blank lines at either end dropped) equal exactly one run of
  whole file lines, byte for byte. This is the `applies` score.
- *lenient*: otherwise, the SEARCH lines match exactly one run of file lines when trailing
  whitespace is ignored and the whole block may be shifted by one uniform indentation offset
  (aider re-indents the same way); the REPLACE lines are shifted by the same offset. This is
  the `applies_lenient` score, reported separately.
- Zero matches or more than one match (ambiguous) does not apply. An empty SEARCH does not
  apply to an existing file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_HEAD = re.compile(r"^<{5,9} SEARCH>?\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_UPDATED = re.compile(r"^>{5,9} REPLACE\s*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


class EditFormatError(ValueError):
    """The text holds no well-formed SEARCH/REPLACE block."""


class ApplyError(ValueError):
    """A well-formed block does not apply to the files given."""


@dataclass(frozen=True, slots=True)
class EditBlock:
    path: str
    search: str
    replace: str


def _clean_path(line: str) -> str:
    path = line.strip().removesuffix(":").strip().strip("`*#").strip()
    return path.removesuffix(":").strip()


def _path_before(lines: Sequence[str], head: int) -> str | None:
    """The path line for the block whose SEARCH marker is at `head`."""
    i = head - 1
    if i >= 0 and _FENCE.match(lines[i]):
        i -= 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0 or _FENCE.match(lines[i]) or _UPDATED.match(lines[i]):
        return None
    path = _clean_path(lines[i])
    return path if path and " " not in path else None


def _section_end(
    lines: Sequence[str],
    start: int,
    end: re.Pattern[str],
    stray: Sequence[re.Pattern[str]],
    what: str,
) -> int:
    """The index of the first line from `start` that matches `end`; a line matching one of
    `stray` first is an `EditFormatError` ("expected {what}")."""
    j = start
    while j < len(lines) and not end.match(lines[j]):
        if any(p.match(lines[j]) for p in stray):
            raise EditFormatError(f"line {j + 1}: expected {what}")
        j += 1
    return j


def parse(text: str) -> list[EditBlock]:
    """Every SEARCH/REPLACE block in `text`, in order; raises `EditFormatError` if malformed."""
    lines = text.splitlines()
    blocks: list[EditBlock] = []
    i = 0
    last_path: str | None = None
    while i < len(lines):
        line = lines[i]
        if _UPDATED.match(line):
            raise EditFormatError(f"line {i + 1}: {line.strip()!r} outside a SEARCH block")
        if not _HEAD.match(line):
            i += 1
            continue
        path = _path_before(lines, i) or last_path
        if path is None:
            raise EditFormatError(f"line {i + 1}: SEARCH block with no file path before it")
        j = i + 1
        while j < len(lines) and not _DIVIDER.match(lines[j]):
            if _HEAD.match(lines[j]) or _UPDATED.match(lines[j]):
                raise EditFormatError(f"line {j + 1}: expected ======= before {lines[j]!r}")
            j += 1
        if j == len(lines):
            raise EditFormatError(f"line {i + 1}: SEARCH block has no ======= divider")
        k = _section_end(lines, j + 1, _UPDATED, (_HEAD, _DIVIDER), ">>>>>>> REPLACE")
        if k == len(lines):
            raise EditFormatError(f"line {i + 1}: SEARCH block has no >>>>>>> REPLACE")
        blocks.append(EditBlock(path, "\n".join(lines[i + 1 : j]), "\n".join(lines[j + 1 : k])))
        last_path = path
        i = k + 1
    if not blocks:
        raise EditFormatError("no SEARCH/REPLACE block found")
    return blocks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _trim(lines: list[str]) -> list[str]:
    """Drop blank lines at both ends of a SEARCH/REPLACE body."""
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _shifted(line: str, shift: int) -> str | None:
    """`line` re-indented by `shift` spaces; None when it lacks the spaces to remove."""
    if not line:
        return line
    if shift >= 0:
        return " " * shift + line
    return line[-shift:] if line[:-shift].strip(" ") == "" else None


def _matches(file_lines: list[str], search: list[str], lenient: bool) -> list[tuple[int, int]]:
    """(start line, indentation shift) of every place `search` matches."""
    found: list[tuple[int, int]] = []
    anchor = next(i for i, s in enumerate(search) if s.strip())
    for start in range(len(file_lines) - len(search) + 1):
        window = file_lines[start : start + len(search)]
        if not lenient:
            if window == search:
                found.append((start, 0))
            continue
        shift = _indent(window[anchor]) - _indent(search[anchor])
        if all(
            (_shifted(s.rstrip(), shift) or "\0") == w.rstrip() or (not s.strip() and not w.strip())
            for s, w in zip(search, window, strict=True)
        ):
            found.append((start, shift))
    return found


def _replace(content: str, block: EditBlock, lenient: bool) -> str:
    search = _trim(block.search.split("\n"))
    if not search:
        raise ApplyError(f"{block.path}: empty SEARCH")
    file_lines = content.split("\n")
    found = _matches(file_lines, search, lenient)
    mode = "lenient" if lenient else "exact"
    if len(found) != 1:
        raise ApplyError(f"{block.path}: SEARCH matches {len(found)} places ({mode})")
    start, shift = found[0]
    replace = _trim(block.replace.split("\n"))
    if shift:
        replace = [_shifted(r, shift) or r.lstrip(" ") for r in replace]
    return "\n".join(file_lines[:start] + replace + file_lines[start + len(search) :])


def _resolve(files: Mapping[str, str], path: str) -> str:
    wanted = path.removeprefix("./")
    if wanted in files:
        return wanted
    raise ApplyError(f"{path!r} is not one of the files given: {sorted(files)}")


def apply(files: Mapping[str, str], blocks: Sequence[EditBlock], lenient: bool) -> dict[str, str]:
    """Apply blocks in order to a copy of `files` (path -> text); raises `ApplyError`."""
    out = dict(files)
    for block in blocks:
        path = _resolve(out, block.path)
        try:
            out[path] = _replace(out[path], block, lenient=False)
        except ApplyError:
            if not lenient:
                raise
            out[path] = _replace(out[path], block, lenient=True)
    return out
