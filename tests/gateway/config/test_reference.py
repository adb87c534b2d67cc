"""docs/configuration.md is written from the config models (gateway/config/reference.py): the
committed page is what the models say today, every key has a meaning, and the tables, types,
bounds and defaults come out as a reader needs them."""

from __future__ import annotations

from pathlib import Path

from gateway.config import Config
from gateway.config.reference import render, tables

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_committed_page_is_the_models() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: python -m gateway.config.reference > docs/configuration.md"
    )


def test_every_key_says_what_it_means() -> None:
    missing = [f"{t.header} {k}" for t in tables(Config) for k, _, _, m in t.keys if not m]
    assert missing == [], f"add a comment above these fields: {missing}"


def test_tables_keys_bounds_and_defaults() -> None:
    by = {t.header: {k: (ty, d) for k, ty, d, _ in t.keys} for t in tables(Config)}
    assert {"[server]", "[store]", "[[upstreams]]", "[models.NAME]", "[[access.keys]]"} <= set(by)
    assert by["[server]"]["max_body_bytes"] == ("int (>= 1024)", "`8388608`")
    assert by["[[upstreams]]"]["kind"][0] == '"vllm" | "openai" | "llamacpp"'
    assert by["[[upstreams]]"]["name"][1] == "required"
    # Each watchdog check's defaults are its own, not the shared model's.
    assert by["[watchdog.truncation]"]["rate"][1] == "`0.2`"
    assert by["[watchdog.cost_drift]"]["demote"][1] == "`false`"
    assert "root" not in by.get("[config]", {})  # not a TOML key
