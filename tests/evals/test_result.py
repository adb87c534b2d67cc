from pathlib import Path

from evals.result import ItemResult, read_results, write_results


def test_round_trip(tmp_path: Path) -> None:
    results = [
        ItemResult("local", "i1", "d1", "math", "correct", "stop", 120, 80, 1.5, 0.0001, "h", "r1"),
        ItemResult("api", "i2", "d2", "editformat", "malformed", parts={"well_formed": False}),
    ]
    path = tmp_path / "run.jsonl"
    write_results(path, results)
    assert read_results(path) == results


def test_unknown_keys_are_ignored() -> None:
    data = ItemResult("t", "i", "d", "f", "wrong").to_dict() | {"added_later": 1}
    assert ItemResult.from_dict(data) == ItemResult("t", "i", "d", "f", "wrong")
