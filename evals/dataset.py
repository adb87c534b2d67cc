"""User datasets: a JSONL file of questions graded by one of the suite's own scorers.

    plumbline eval run -t MODEL --suite none --dataset aime.jsonl:math_integer
    plumbline eval run -t MODEL --dataset mmlu_pro.jsonl:knowledge_mcq

One JSON object a line. Every line has an `id` and either a `question` (the scorer's answer-format
instruction is put around it, so the strict final line is asked for) or `messages` (sent as they
are — then the prompt must ask for the final line itself). The answer, by scorer:

    math_integer      "answer": 42, or every answer of a multi-answer question: [3, 5]
    math_symbolic     "answer": "sqrt(2)/2"          (sympy syntax), or a list of them
    knowledge_mcq     "options": ["…", …] (2–10), "answer": "C" (a letter) or 2 (an index)
    knowledge_short   "answer": "Paris" or ["Paris", "Paris, France"] (accepted aliases)

The file's sha256 goes into every item's `meta` and the family is named after the file, so the
run's item-set hash changes whenever the file does: only identical items are ever paired. A line
that does not fit its scorer is an error naming the line, never silently skipped.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from evals.families.knowledge import LETTERS, MCQ_PROMPT, SHORT_PROMPT
from evals.families.math import PROMPT as MATH_PROMPT
from evals.item import Item

SCORERS = ("math_integer", "math_symbolic", "knowledge_mcq", "knowledge_short")
FORMS = {"math_integer": "<integer>", "math_symbolic": "<exact expression>"}
MULTI_FORM = "<every value, separated by commas>"


class DatasetError(ValueError):
    """A dataset file or one of its lines does not fit the declared scorer."""


def _integer(line: dict[str, Any], where: str) -> Any:
    answer = line.get("answer")
    if isinstance(answer, list) and answer:
        return [_integer({"answer": a}, where) for a in answer]
    if isinstance(answer, bool) or not isinstance(answer, int | str):
        raise DatasetError(f"{where}: math_integer needs an integer answer")
    try:
        return int(answer)
    except ValueError:
        raise DatasetError(f"{where}: {answer!r} is not an integer") from None


def _symbolic(line: dict[str, Any], where: str) -> Any:
    answer = line.get("answer")
    if isinstance(answer, list) and answer:
        return [_symbolic({"answer": str(a) if type(a) is int else a}, where) for a in answer]
    if not isinstance(answer, str) or not answer.strip():
        raise DatasetError(f"{where}: math_symbolic needs the answer as a sympy string")
    return answer


def _short(line: dict[str, Any], where: str) -> Any:
    answer = line.get("answer")
    aliases = [answer] if isinstance(answer, str) else answer
    if (
        not isinstance(aliases, list)
        or not aliases
        or not all(isinstance(a, str) and a.strip() for a in aliases)
    ):
        raise DatasetError(f"{where}: knowledge_short needs a string or a list of strings")
    return {"aliases": aliases}


def _mcq(line: dict[str, Any], where: str) -> Any:
    answer = line.get("answer")
    options = line.get("options")
    if not isinstance(options, list) or not 2 <= len(options) <= len(LETTERS):
        raise DatasetError(f"{where}: knowledge_mcq needs 2 to {len(LETTERS)} options")
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(options):
        letter = LETTERS[answer]
    elif isinstance(answer, str) and answer.strip().upper() in LETTERS[: len(options)]:
        letter = answer.strip().upper()
    else:
        raise DatasetError(f"{where}: the answer must be an option letter or index")
    return {"options": [str(o) for o in options], "letter": letter}


# How each scorer's answer is read from a line (and refused when it does not fit).
_ANSWERS = {
    "math_integer": _integer,
    "math_symbolic": _symbolic,
    "knowledge_short": _short,
    "knowledge_mcq": _mcq,
}


def _prompt(scorer: str, question: str, answer: Any) -> str:
    if scorer in FORMS:
        form = MULTI_FORM if isinstance(answer, list) else FORMS[scorer]
        return MATH_PROMPT.format(form=form, question=question)
    if scorer == "knowledge_short":
        return SHORT_PROMPT.format(question=question)
    listing = "\n".join(f"{LETTERS[i]}) {o}" for i, o in enumerate(answer["options"]))
    return MCQ_PROMPT.format(question=question, options=listing)


def _line(text: bytes, where: str) -> dict[str, Any]:
    try:
        line = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise DatasetError(f"{where}: not JSON ({e})") from None
    if not isinstance(line, dict) or not isinstance(line.get("id"), str | int):
        raise DatasetError(f"{where}: each line needs an object with an `id`")
    return line


def _messages(scorer: str, line: dict[str, Any], answer: Any, where: str) -> tuple[Any, ...]:
    """The line's own `messages`, else its `question` in the scorer's prompt."""
    if isinstance(line.get("messages"), list) and line["messages"]:
        return tuple(line["messages"])
    if isinstance(line.get("question"), str) and line["question"].strip():
        return ({"role": "user", "content": _prompt(scorer, line["question"], answer)},)
    raise DatasetError(f"{where}: give a `question` or `messages`")


def load(path: Path, scorer: str, limit: int | None = None) -> list[Item]:
    """The items of one dataset file, in file order (the first `limit` when given)."""
    if scorer not in SCORERS:
        raise DatasetError(f"unknown scorer {scorer!r} for a dataset; one of {', '.join(SCORERS)}")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    family = f"dataset:{path.stem}"
    items: list[Item] = []
    seen: set[str] = set()
    for number, text in enumerate(raw.splitlines(), start=1):
        if not text.strip():
            continue
        where = f"{path.name}:{number}"
        line = _line(text, where)
        item_id = f"{family}:{line['id']}"
        if item_id in seen:
            raise DatasetError(f"{where}: duplicate id {line['id']!r}")
        seen.add(item_id)
        answer = _ANSWERS[scorer](line, where)
        items.append(
            Item(
                id=item_id,
                family=family,
                messages=_messages(scorer, line, answer, where),
                answer=answer,
                scorer=scorer,
                meta={"file_sha256": digest, "line": number},
            )
        )
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise DatasetError(f"{path}: no items")
    return items
