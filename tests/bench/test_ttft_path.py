"""The time-to-first-token timeline's own arithmetic (bench/ttft_path.py): each request's marks
counted from its read and from its first upstream event, the warm-up left out, medians over the
requests; and the cores of `--pin`."""

from __future__ import annotations

from bench.ttft_path import cores, timeline


def marks(start: int, write: int, event: int, first: int, sent: int | None = None) -> list:
    """One request's marks, in µs after `start` (in ns, as perf_counter_ns gives them)."""
    out = [("read", start), ("validate>", start + 100_000), ("write", start + write * 1000)]
    if sent is not None:
        out.append(("sent<", start + sent * 1000))
    out += [("event", start + event * 1000), ("client_first", start + first * 1000)]
    return out


def test_steps_are_medians_from_the_read_and_from_the_first_event_without_the_warmup() -> None:
    t = 0
    stream: list = []
    for write, event, first in (
        (900, 20_000, 20_500),
        (400, 20_000, 20_100),
        (500, 21_000, 21_300),
        (600, 19_000, 19_200),
    ):
        stream += marks(t, write, event, first, sent=write + 80)
        t += 50_000_000
    stream += [("read", t), ("write", t + 300_000)]  # a request with no event: left out
    before, after = timeline(stream, warmup=1)
    assert before["read"] == 0 and before["validate>"] == 100
    assert before["write"] == 500  # the median of 400, 500, 600: the warm-up's 900 is out
    assert before["sent<"] == 580  # the deferred work ends after the write, before the event
    assert after["event"] == 0 and after["client_first"] == 200  # 100, 300, 200
    assert "client_first" not in before and "write" not in after


def test_pinned_cores_are_read_as_lists_and_ranges() -> None:
    assert cores("0,2-3") == {0, 2, 3}
    assert cores("15") == {15}
    assert cores("") == set()


def test_the_report_has_a_row_for_each_step_some_target_passed() -> None:
    import argparse

    from bench.ttft_path import report

    args = argparse.Namespace(
        upstream=None,
        prefill_ms=20.0,
        pace=430.0,
        pin=None,
        requests=10,
        warmup=2,
        words=64,
        tokens=8,
    )
    results = {
        "gateway": {
            "before": {"read": 0.0, "validate>": 90.0, "write": 700.0},
            "after": {"event": 0.0, "client_first": 500.0},
            "p50": 24.0,
            "mean": 24.5,
        },
        "floor": {
            "before": {"read": 0.0, "write": 200.0},
            "after": {"event": 0.0, "client_first": 50.0},
            "p50": 23.0,
            "mean": 23.25,
        },
    }
    text = report(results, args)
    assert "| validation | 90 | – |" in text
    assert "| request written to the upstream | 700 | 200 |" in text
    assert "| first event to the client | 500 | 50 |" in text
    assert "| TTFT mean, ms | 24.500 | 23.250 |" in text
    assert "access guard" not in text  # no target passed it
