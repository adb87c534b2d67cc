"""Log lines name their request (`gateway/logs.py`): what the gateway logs while it serves a
request carries the id the answer says as `x-plumbline-request-id`; a line written outside any
request says "-", never another request's id."""

from __future__ import annotations

import logging

import httpx
import pytest
from openai import OpenAI

from gateway import logs
from gateway.ledger.record import Record
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import config_from, running_gateway


class FailingSink:
    """A record sink that fails: the gateway logs the failure and carries on."""

    def submit(self, record: Record) -> None:
        raise RuntimeError("this sink fails on purpose")


def test_a_log_line_names_the_request_it_was_written_for(
    fake: FakeHandle, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}],
            "models": {"smol": {"upstreams": ["a"]}},
        }
    )
    caplog.set_level(logging.ERROR, logger="plumbline")
    with running_gateway(config, sinks=[FailingSink()]) as url:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0)
        ids = []
        for _ in range(3):
            raw = client.chat.completions.with_raw_response.create(
                model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            ids.append(raw.headers["x-plumbline-request-id"])
        httpx.get(url.removesuffix("/v1") + "/health", timeout=10)
    failed = [r for r in caplog.records if "record sink FailingSink failed" in r.getMessage()]
    assert [r.request_id for r in failed] == ids  # type: ignore[attr-defined]
    assert len(set(ids)) == 3


def test_a_line_outside_a_request_names_none(caplog: pytest.LogCaptureFixture) -> None:
    logs.stamp_records()
    with caplog.at_level(logging.INFO, logger="gateway"):
        logging.getLogger("gateway.test").info("outside any request")
    assert caplog.records[-1].request_id == "-"  # type: ignore[attr-defined]


def test_the_format_names_the_request() -> None:
    logs.stamp_records()
    token = logs.REQUEST_ID.set("req-abc")
    try:
        record = logging.getLogRecordFactory()(
            "gateway.test", logging.WARNING, __file__, 1, "hello", (), None
        )
    finally:
        logs.REQUEST_ID.reset(token)
    line = logging.Formatter(logs.FORMAT).format(record)
    assert "WARNING gateway.test [req-abc] hello" in line
