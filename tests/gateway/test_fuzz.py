"""Bad input: the reduced CI run of bench/fuzz.py (schemathesis cases from the gateway's OpenAPI
schema plus the own corpus). No 5xx, no dropped connection, every 4xx an OpenAI error envelope
whose message says what was wrong. `python bench/fuzz.py` runs the full >= 10,000 cases."""

from __future__ import annotations

from bench.fuzz import fuzz, fuzz_target, problem_with, raw_requests, send_raw


def test_schema_and_corpus_reduced() -> None:
    counts = fuzz(400, seed=1)
    assert counts.problems == []
    assert counts.server_errors == counts.crashes == counts.bad_envelopes == 0
    # The run really exercised every kind of input and reached the upstream too.
    assert counts.schema_cases >= 100 and counts.corpus_cases >= 200 and counts.raw_cases >= 15
    assert counts.by_status.get("200", 0) > 20 and counts.by_status.get("400", 0) > 100
    assert counts.by_status.get("413", 0) >= 3 and counts.by_status.get("431", 0) >= 2


def test_oversized_heads_are_refused_with_a_431_envelope() -> None:
    with fuzz_target() as (root, port):
        sent = dict(raw_requests(port))
        for name in ("header_64k", "header_1m", "headers_10k"):
            status, body = send_raw(port, sent[name])
            assert status == 431, (name, body[:200])
            assert problem_with(status, body) is None and b"limit is 65536" in body
        status, body = send_raw(port, sent["lf_in_header"])
        assert status == 400  # header injection never reaches the app
