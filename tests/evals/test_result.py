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


def test_errors_detail_and_timing_round_trip(tmp_path: Path) -> None:
    results = [
        ItemResult(
            "m",
            "i",
            "d",
            "math",
            "error",
            run="r",
            error_class="http_503",
            error="HTTP 503: down",
            upstream="u",
            started=1.5e9,
            prompt_tokens=12,
        ),  # fmt: skip
        ItemResult("m", "j", "e", "ifeval", "wrong", "stop", detail="failed: no_comma"),
    ]
    path = tmp_path / "run.jsonl"
    write_results(path, results)
    assert read_results(path) == results
    assert results[0].finish_reason is None  # the upstream gave no finish reason


def test_a_result_written_with_the_error_in_finish_reason_reads_it_as_the_error() -> None:
    """Results written before errors had their own field kept the message in finish_reason."""
    old = {
        "target": "m",
        "item_id": "i",
        "item_digest": "d",
        "family": "math",
        "outcome": "error",
        "finish_reason": "HTTP 503: upstream down",
    }
    got = ItemResult.from_dict(old)
    assert got.finish_reason is None
    assert (got.error, got.error_class) == ("HTTP 503: upstream down", "http_503")
    conn = ItemResult.from_dict(old | {"finish_reason": "connection: refused"})
    assert conn.error_class == "connection"
