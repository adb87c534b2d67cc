"""The agent harnesses the tests drive through the gateway: Codex CLI, Claude Code, opencode and
Qwen Code (npm releases pinned in deploy/install.sh, installed into .harness).

Each `run_*` writes the harness's config into a fresh home, points it at a gateway's /v1 URL
with a route name as its model, runs it headless in `workdir` with the prompt, and returns what
it printed. Every run is bounded: past `timeout` seconds its whole process group is killed and
the result says so (exit -9), so a harness that loops on a tiny model's junk fails a test
instead of hanging it. A binary missing is a failure, not a skip: CI installs them.

`scripted_route` is the scripted upstream these sessions run against: the fake upstream's
harness mode (`kit/plumbline_kit/fakes/plan.py`: the first offered tool of the calls given, then
``All done.`` once a tool result comes back), behind a gateway route of the window given.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import ListSink, config_from, running_gateway

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".harness" / "node_modules" / ".bin"
KEY = "plumbline-test-key"
DONE = "All done."  # what the scripted model says once a tool result came back


def binary(name: str) -> Path:
    path = BIN / name
    assert path.exists(), f"{name} is not installed at {path}: run deploy/install.sh"
    return path


def run_bounded(
    argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run `argv` in `cwd` (PWD too: opencode takes its project folder from $PWD, not from its
    working directory) with no stdin, in its own process group; past `timeout` kill the group
    (a harness's children with it) and return exit -9 with a line saying so on stderr."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env | {"PWD": str(cwd)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[killed after {timeout:g} s]"
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def _env(home: Path, drop: tuple[str, ...], **extra: str) -> dict[str, str]:
    """This process's environment less the variables of `drop` prefixes (a developer's own
    keys and endpoints), with a fresh HOME and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return env | {"HOME": str(home), "NO_COLOR": "1", **extra}


def run_codex(
    url: str,
    model: str,
    home: Path,
    workdir: Path,
    prompt: str,
    window: int = 65536,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`codex exec` over the Responses door, sandbox off (the workdir is a throwaway one)."""
    codex = binary("codex")
    (home / "codex").mkdir(parents=True, exist_ok=True)
    (home / "codex" / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "plumbline"\n'
        f"model_context_window = {window}\n"
        "[model_providers.plumbline]\n"
        'name = "plumbline"\n'
        f'base_url = "{url}"\n'
        'wire_api = "responses"\n'
        'env_key = "PLUMBLINE_KEY"\n'
    )
    env = _env(home, ("OPENAI_", "CODEX_"), CODEX_HOME=str(home / "codex"), PLUMBLINE_KEY=KEY)
    argv = [str(codex), "exec", "--skip-git-repo-check"]
    argv += ["--dangerously-bypass-approvals-and-sandbox", prompt]
    return run_bounded(argv, workdir, env, timeout)


def run_claude(
    url: str,
    model: str,
    home: Path,
    workdir: Path,
    prompt: str,
    window: int = 65536,
    timeout: float = 180,
    args: Sequence[str] = ("--allowedTools", "Bash"),
    output: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """`claude -p` over the Messages door (the gateway root as ANTHROPIC_BASE_URL); `output`:
    the `max_tokens` it asks (CLAUDE_CODE_MAX_OUTPUT_TOKENS), else its own default."""
    claude = binary("claude")
    (home / "config").mkdir(parents=True, exist_ok=True)
    env = _env(
        home,
        ("ANTHROPIC_", "CLAUDE_"),
        CLAUDE_CONFIG_DIR=str(home / "config"),
        ANTHROPIC_BASE_URL=url.removesuffix("/v1"),
        ANTHROPIC_AUTH_TOKEN=KEY,
        ANTHROPIC_MODEL=model,
        CLAUDE_CODE_MAX_CONTEXT_TOKENS=str(window),
        CLAUDE_CODE_MAX_RETRIES="2",
        # Hermetic: no feature-flag or telemetry calls to the vendor (no network here), and its
        # background model (titles, summaries) is the same route, not a name the gateway lacks.
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        ANTHROPIC_SMALL_FAST_MODEL=model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
        **({"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output)} if output is not None else {}),
    )
    return run_bounded([str(claude), "-p", prompt, *args], workdir, env, timeout)


def opencode_config(url: str, model: str, window: int, output: int, steps: int) -> dict[str, Any]:
    """opencode.json: one `@ai-sdk/openai-compatible` provider at the gateway, its model the
    route with the route's window, the build agent's steps bounded, sharing off."""
    limit = {"context": window, "output": output}
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "plumbline": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Plumbline",
                "options": {"baseURL": url, "apiKey": "{env:PLUMBLINE_KEY}"},
                "models": {model: {"name": model, "limit": limit}},
            }
        },
        "model": f"plumbline/{model}",
        "small_model": f"plumbline/{model}",
        "agent": {"build": {"steps": steps}},
        "autoupdate": False,
        "share": "disabled",
    }


def run_opencode(
    url: str,
    model: str,
    home: Path,
    workdir: Path,
    prompt: str,
    window: int = 65536,
    output: int = 4096,
    steps: int = 8,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`opencode run` over chat completions; its model table fetch and update check off."""
    opencode = binary("opencode")
    (home / "opencode").mkdir(parents=True, exist_ok=True)
    config = home / "opencode" / "opencode.json"
    config.write_text(json.dumps(opencode_config(url, model, window, output, steps), indent=2))
    env = _env(
        home,
        ("OPENAI_", "OPENCODE_", "XDG_"),
        OPENCODE_CONFIG=str(config),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        PLUMBLINE_KEY=KEY,
    )
    return run_bounded([str(opencode), "run", prompt], workdir, env, timeout)


# Qwen Code's settings: the OpenAI-compatible auth, no usage statistics, telemetry or update
# check (each of which dials out at start).
QWEN_SETTINGS = {
    "security": {"auth": {"selectedType": "openai"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "disableUpdateNag": True},
}


def run_qwen(
    url: str,
    model: str,
    home: Path,
    workdir: Path,
    prompt: str,
    max_turns: int = 8,
    timeout: float = 120,
    output: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """`qwen` one-shot (positional prompt) over chat completions, tools auto-approved; `output`:
    the `max_tokens` it asks (QWEN_CODE_MAX_OUTPUT_TOKENS), else its own default."""
    qwen = binary("qwen")
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(QWEN_SETTINGS, indent=2))
    env = _env(
        home,
        ("OPENAI_", "QWEN_", "DASHSCOPE_"),
        OPENAI_BASE_URL=url,
        OPENAI_API_KEY=KEY,
        OPENAI_MODEL=model,
        QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        **({"QWEN_CODE_MAX_OUTPUT_TOKENS": str(output)} if output is not None else {}),
    )
    argv = [str(qwen), "--yolo", "--max-session-turns", str(max_turns), prompt]
    return run_bounded(argv, workdir, env, timeout)


def chat_requests(fake: FakeHandle) -> list[dict[str, Any]]:
    """The bodies of the chat requests the upstream was sent, in order."""
    return [r["body"] for r in fake.requests() if r["path"] == "/v1/chat/completions"]


def tool_turn(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first assistant tool call and the tool message after it in a chat request."""
    messages = body["messages"]
    at = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls"))
    return messages[at], messages[at + 1]


def route_config(base_url: str, model: str, window: int) -> Any:
    """A gateway of one route `model` on the upstream at `base_url`, serving `window` tokens."""
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": "a",
                    "kind": "vllm",
                    "base_url": base_url,
                    "model": "fake-model",
                    "profile": "smollm2",
                    "context_window": window,
                }
            ],
            "models": {model: {"profile": "smollm2", "upstreams": ["a"]}},
        }
    )


@contextlib.contextmanager
def scripted_route(
    calls: list[dict[str, Any]], model: str = "plumbline-agent", window: int = 65536
) -> Iterator[tuple[FakeHandle, str, ListSink]]:
    """The scripted upstream (calling the first of `calls` the request offers) behind a gateway
    route `model`; yield the fake, the gateway's /v1 URL and its records."""
    sink = ListSink()
    with (
        running_fake(harness=calls) as fake,
        running_gateway(route_config(fake.base_url, model, window), sinks=[sink]) as url,
    ):
        yield fake, url, sink
