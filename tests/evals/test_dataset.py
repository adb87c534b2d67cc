"""User datasets: JSONL lines graded by the suite's own scorers, hash-pinned, strict."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from evals import families, runner
from evals.dataset import DatasetError, load
from evals.item import Reply, items_digest
from plumbline_kit.fakes.upstream import running_fake
from tests.evals.test_runner import gateway_for
from tests.harness import running_gateway


def write(path: Path, *lines: dict) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    return path


def test_integer_dataset_scores_with_the_math_scorer(tmp_path: Path) -> None:
    path = write(
        tmp_path / "aime.jsonl",
        {"id": 1, "question": "2+2?", "answer": 4},
        {"id": "b", "question": "3*3?", "answer": "9"},
    )
    items = load(path, "math_integer")
    assert [i.id for i in items] == ["dataset:aime:1", "dataset:aime:b"]
    assert "ANSWER:" in items[0].messages[0]["content"]
    assert families.score(items[0], Reply("so\nANSWER: 4")).correct
    assert families.score(items[0], Reply("ANSWER: 3 or 4")).outcome == "wrong"
    assert families.score(items[1], Reply("ANSWER: 9")).correct


def test_multi_answer_lines_are_sets(tmp_path: Path) -> None:
    path = write(
        tmp_path / "roots.jsonl",
        {"id": 1, "question": "Solve x^2 - 8x + 15 = 0.", "answer": [3, "5"]},
        {"id": 2, "question": "Solve x^2 - 2x - 1 = 0.", "answer": ["1+sqrt(2)", "1-sqrt(2)"]},
    )
    ints = load(path, "math_integer", limit=1)
    assert ints[0].answer == [3, 5]
    assert "separated by commas" in ints[0].messages[0]["content"]
    assert families.score(ints[0], Reply("ANSWER: 5, 3")).correct
    assert families.score(ints[0], Reply("ANSWER: 3")).outcome == "wrong"
    exact = load(path, "math_symbolic")[1]
    assert families.score(exact, Reply("ANSWER: 1 \\pm \\sqrt{2}")).correct


def test_mcq_dataset_letters_and_indexes(tmp_path: Path) -> None:
    path = write(
        tmp_path / "mmlu.jsonl",
        {
            "id": "q1",
            "question": "Largest planet?",
            "options": ["Mars", "Jupiter", "Neptune"],
            "answer": "B",
        },
        {"id": "q2", "question": "Smallest?", "options": ["Mercury", "Earth"], "answer": 0},
    )
    q1, q2 = load(path, "knowledge_mcq")
    assert "B) Jupiter" in q1.messages[0]["content"]
    assert families.score(q1, Reply("ANSWER: B")).correct
    assert families.score(q1, Reply("ANSWER: C")).outcome == "wrong"
    assert families.score(q2, Reply("ANSWER: A")).correct


def test_changed_file_changes_the_item_set_hash(tmp_path: Path) -> None:
    a = write(tmp_path / "d.jsonl", {"id": 1, "question": "x?", "answer": "yes"})
    first = items_digest(load(a, "knowledge_short"))
    write(a, {"id": 1, "question": "x?", "answer": "no"})
    assert items_digest(load(a, "knowledge_short")) != first


@pytest.mark.parametrize(
    "line, scorer, fragment",
    [
        ({"question": "no id", "answer": 1}, "math_integer", "`id`"),
        ({"id": 1, "question": "q", "answer": 1.5}, "math_integer", "integer"),
        ({"id": 1, "question": "q", "options": ["a"], "answer": "A"}, "knowledge_mcq", "options"),
        (
            {"id": 1, "question": "q", "options": ["a", "b"], "answer": "Z"},
            "knowledge_mcq",
            "letter",
        ),
        ({"id": 1, "answer": "Paris"}, "knowledge_short", "question"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, line: dict, scorer: str, fragment: str) -> None:
    path = write(tmp_path / "bad.jsonl", line)
    with pytest.raises(DatasetError, match=fragment) as info:
        load(path, scorer)
    assert "bad.jsonl:1" in str(info.value)


def test_dataset_runs_through_the_gateway(tmp_path: Path) -> None:
    path = write(
        tmp_path / "mine.jsonl", *({"id": i, "question": f"{i}+0?", "answer": i} for i in range(5))
    )
    with (
        running_fake(text="ANSWER: 3") as fake,
        running_gateway(gateway_for(ok=fake.base_url)) as url,
    ):
        spec = runner.RunSpec(
            base_url=url,
            targets=["ok"],
            suite="none",
            runs_dir=tmp_path,
            datasets=[(path, "math_integer")],
            timeout_s=20,
        )
        meta, results = runner.load_run(runner.run(spec, show_progress=False))
    assert len(results) == 5 and sum(r.correct for r in results) == 1
    assert meta["datasets"][0]["scorer"] == "math_integer"
