"""Engine fingerprints: what serves behind each upstream, learnt by the health prober and
carried on every answer (`gateway/serving/engine.py`)."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from gateway.config import Upstream
from gateway.serving.engine import Engines, fingerprint
from gateway.serving.wire import Wire
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, running_gateway, wait_for

MESSAGES = [{"role": "user", "content": "hello"}]
FINGERPRINT = re.compile(r"vllm (\S+) template ([0-9a-f]{12})")


def engines(url: str) -> dict[str, str | None]:
    health = httpx.get(url.removesuffix("/v1") + "/health").json()
    return {name: u["engine"] for name, u in health["upstreams"].items()}


def test_fingerprint_is_learnt_relearnt_after_an_outage_and_sent(fake: FakeHandle) -> None:
    config = config_from(
        {
            "server": {"health_interval_s": 0.05, "retry_backoff_s": 0},
            "upstreams": [
                {"name": "v", "kind": "vllm", "base_url": fake.base_url, "model": "fake-model"},
                {"name": "c", "kind": "llamacpp", "base_url": fake.base_url, "model": "fake-model"},
            ],
            "models": {"v": {"upstreams": ["v"]}, "c": {"upstreams": ["c"]}},
        }
    )
    client_of = lambda url: openai.OpenAI(base_url=url, api_key="unused", max_retries=0)  # noqa: E731
    sink = ListSink()
    with running_gateway(config, sinks=[sink]) as url:
        wait_for(lambda: engines(url)["v"] is not None)
        first = engines(url)
        assert first["c"] is None  # llama-cpp-python says neither
        version, template = FINGERPRINT.fullmatch(first["v"] or "").groups()  # type: ignore[union-attr]
        assert version == "0.0.0-fake"
        raw = client_of(url).chat.completions.with_raw_response.create(model="v", messages=MESSAGES)
        assert raw.headers["x-plumbline-engine"] == first["v"]
        other = client_of(url).chat.completions.with_raw_response.create(
            model="c", messages=MESSAGES
        )
        assert "x-plumbline-engine" not in other.headers
        wait_for(lambda: len(sink.records) == 2)
        assert [r.engine for r in sink.records] == [first["v"], None]  # on the record too

        fake.set_engine(version="0.0.1-fake", chat_template="chatml")
        # The replica restarts, upgraded: down for a probe, then up again.
        fake.set_default(status=503)
        wait_for(
            lambda: (
                not httpx.get(url.removesuffix("/v1") + "/health").json()["upstreams"]["v"][
                    "healthy"
                ]
            )
        )
        fake.set_default()
        wait_for(lambda: engines(url)["v"] != first["v"])
        version2, template2 = FINGERPRINT.fullmatch(engines(url)["v"] or "").groups()  # type: ignore[union-attr]
        assert version2 == "0.0.1-fake" and template2 != template


async def test_an_upstream_that_says_nothing_is_asked_again_and_logged_once(
    fake: FakeHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """A vLLM upstream behind a path that answers neither /version nor /tokenize has no
    fingerprint: a warning once, and it stays due at every probe. One that answers only one of
    them is named with `?` for the other."""
    mute = Upstream(name="mute", kind="vllm", base_url=fake.base_url + "/nothing", model="m")
    engines, wire = Engines(), Wire(5.0)
    try:
        for _ in range(2):
            assert engines.due(mute, healthy=True)
            await engines.learn(wire, [mute], timeout=5.0)
        assert "mute" not in engines.known
        assert caplog.text.count("engine: mute answers neither") == 1
        fake.set_engine(version="")  # /version answers 404 now
        plain = Upstream(name="v", kind="vllm", base_url=fake.base_url, model="m")
        half = await fingerprint(wire, plain, 5.0)
    finally:
        await wire.close()
    assert half is not None and re.fullmatch(r"vllm \? template [0-9a-f]{12}", half)
