from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_config, parse_config
from gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_the_repository_config_loads() -> None:
    cfg = load_config(ROOT / "config.toml")
    assert "smollm2" in cfg.models
    assert cfg.upstream("smol-vllm").launch is not None
    assert cfg.profile_for("smollm2").sampling.temperature == 0.2


def test_builtin_profiles_cite_their_source() -> None:
    cfg = parse_config({})
    assert {
        "qwen3-thinking",
        "gpt-oss",
        "gemma-4",
        "glm",
        "deepseek",
        "nemotron",
        "minimax",
        "smollm2",
    } <= set(cfg.profiles)
    assert all(p.source for p in cfg.profiles.values())


def test_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match=r"server\.prot: unknown key"):
        parse_config({"server": {"prot": 1}})


def test_dangling_names_are_named() -> None:
    data = {
        "upstreams": [
            {
                "name": "a",
                "kind": "vllm",
                "base_url": "http://127.0.0.1:1/v1",
                "model": "m",
                "profile": "nope",
            }
        ],
        "models": {"x": {"upstreams": ["a", "ghost"], "fallback": ["phantom"]}},
        "prices": {"spectre": {"input": 1, "output": 2}},
    }
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    message = str(info.value)
    for name in ("nope", "ghost", "phantom", "spectre"):
        assert name in message


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nport=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_api_key_is_read_by_env_name_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLUMBLINE_TEST_KEY", "sk-planted-secret")
    cfg = parse_config(
        {
            "upstreams": [
                {
                    "name": "p",
                    "kind": "openai",
                    "model": "m",
                    "base_url": "https://example.invalid/v1",
                    "api_key_env": "PLUMBLINE_TEST_KEY",
                }
            ]
        }
    )
    assert cfg.upstream("p").api_key() == "sk-planted-secret"
    assert "sk-planted-secret" not in cfg.model_dump_json()


def _routes(models: dict[str, Any], **upstream: Any) -> Any:
    return parse_config(
        {
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
                {"name": "b", "model": "m", "base_url": "http://127.0.0.1:2/v1", **upstream},
            ],
            "models": models,
        }
    )


def test_aliases_resolve_to_their_route_and_may_not_collide() -> None:
    cfg = _routes({"x": {"upstreams": ["a"], "aliases": ["gpt-5.5"]}}, kind="vllm")
    assert cfg.resolve("gpt-5.5") == "x" and cfg.resolve("x") == "x"
    assert cfg.resolve("gpt-6") is None
    with pytest.raises(ConfigError) as info:
        _routes(
            {
                "x": {"upstreams": ["a"], "aliases": ["y", "shared"]},
                "y": {"upstreams": ["a"], "aliases": ["shared"]},
            },
            kind="vllm",
        )
    message = str(info.value)
    assert "models.x.aliases: 'y' is a model's own name" in message
    assert "models.y.aliases: 'shared' is already an alias of 'x'" in message
    with pytest.raises(ConfigError, match=r"models\.x\.aliases\.0: String should match"):
        _routes({"x": {"upstreams": ["a"], "aliases": ["bad name"]}}, kind="vllm")


@pytest.mark.parametrize(
    ("upstream", "window"),
    [
        ({"kind": "openai"}, None),
        ({"kind": "openai", "context_window": 128000}, 128000),
        ({"kind": "vllm", "profile": "smollm2"}, 8192),
        ({"kind": "vllm", "launch": {"max_model_len": 2048}}, 2048),
        ({"kind": "vllm", "launch": {"args": ["--max-model-len", "1024"]}}, 1024),
        ({"kind": "llamacpp", "launch": {"engine": "llamacpp", "args": ["--n_ctx=512"]}}, 512),
        ({"kind": "vllm", "profile": "smollm2", "context_window": 4096}, 4096),
    ],
)
def test_each_upstream_window_and_the_routes_smallest(
    upstream: dict[str, Any], window: int | None
) -> None:
    cfg = _routes(
        {"x": {"upstreams": ["a"], "fallback": ["b"]}, "y": {"upstreams": ["b"]}}, **upstream
    )
    assert cfg.upstream_window(cfg.upstream("b")) == window
    # Route x: b's window (a has none known); route y: b's, else its profile's, else unknown.
    assert cfg.context_window("x") == window
    assert cfg.context_window("y") == window


def test_a_window_the_server_says_it_serves_is_taken_with_the_configured_one() -> None:
    cfg = _routes({"x": {"upstreams": ["b"]}}, kind="vllm", context_window=4096)
    b = cfg.upstream("b")
    assert cfg.upstream_window(b, learned=2048) == 2048  # the smaller of the two
    assert cfg.upstream_window(b, learned=8192) == 4096
    assert cfg.context_window("x", {"b": 1024}) == 1024
    bare = _routes({"x": {"upstreams": ["b"]}}, kind="vllm")
    assert bare.upstream_window(bare.upstream("b"), learned=3000) == 3000


def test_serve_overrides_reach_what_reads_the_listening_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `plumbline serve --port` (and its workers, through the environment): the scheduler's
    # eval runs call the gateway where it really listens, not at the file's [server].port.
    from starlette.testclient import TestClient

    from gateway.config import listening, listening_from_env
    from gateway.edge.app import create_app

    config = parse_config(
        {"server": {"host": "0.0.0.0", "port": 8400}, "store": {"enabled": False}}
    )
    assert listening(config) is config
    moved = listening(config, port=9123)
    assert (moved.server.host, moved.server.port) == ("0.0.0.0", 9123)
    assert moved.server.model_dump(exclude={"port"}) == config.server.model_dump(exclude={"port"})
    app = create_app(moved)
    with TestClient(app):  # the gateway is built at startup
        assert app.state.gateway.scheduler.base_url == "http://127.0.0.1:9123/v1"
    monkeypatch.setenv("PLUMBLINE_HOST", "127.0.0.2")
    monkeypatch.setenv("PLUMBLINE_PORT", "9124")
    from_env = listening_from_env(config)
    assert (from_env.server.host, from_env.server.port) == ("127.0.0.2", 9124)
    monkeypatch.delenv("PLUMBLINE_HOST")
    monkeypatch.delenv("PLUMBLINE_PORT")
    assert listening_from_env(config) is config


def test_plumbline_serve_port_override_reaches_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from starlette.testclient import TestClient

    import deploy.launch
    from gateway.cli import serving

    served: list[tuple[Any, str, int]] = []
    monkeypatch.setattr(
        deploy.launch, "serve", lambda app, h, p, *_, **__: served.append((app, h, p))
    )
    config = parse_config({"server": {"port": 8400}, "store": {"enabled": False}})
    serving._serve(config, None, 9125)
    ((app, host, port),) = served
    assert (host, port) == ("127.0.0.1", 9125)
    with TestClient(app):
        assert app.state.gateway.scheduler.base_url == "http://127.0.0.1:9125/v1"
