"""The documentation a user reads holds: the README's first lines are the two set-up commands,
it stays short, every TOML example in README.md and docs/ loads as a valid config, and every
relative link points at a file that exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gateway.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "bench" / "README.md"]
TOML = re.compile(r"```toml\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert block[0].startswith("bash deploy/install.sh && .venv/bin/plumbline up")
    assert block[1].startswith(".venv/bin/python -m pytest")
    assert len(lines) <= 200


def _examples() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for i, block in enumerate(TOML.findall(page.read_text(encoding="utf-8"))):
            if "[[upstreams]]" in block or "[models." in block:
                out.append((f"{page.relative_to(ROOT)}#{i}", block))
    return out


def _names(route: dict) -> set[str]:
    """Upstream names a route fragment refers to (its lists, and its shapes' lists)."""
    names = set(route.get("upstreams", [])) | set(route.get("fallback", []))
    for rule in route.get("shapes", {}).values():
        if isinstance(rule, list):
            names |= set(rule)
    return names


@pytest.mark.parametrize(("where", "block"), _examples(), ids=[w for w, _ in _examples()])
def test_every_config_example_loads(where: str, block: str, tmp_path: Path) -> None:
    """A fragment that names upstreams it does not define gets them (a bare OpenAI-compatible
    entry each), and a route table shown on its own gets one, so its own tables and keys are
    still checked."""
    data = tomllib.loads(block)
    models = data.get("models", {})
    for route in list(models.values()):
        route.setdefault("upstreams", ["example-upstream"])  # a table shown on its own
        for rule in route.get("shapes", {}).values():
            if isinstance(rule, str):  # a sub-route by another route's name
                models.setdefault(rule, {"upstreams": ["example-upstream"]})
    ups = data.setdefault("upstreams", [])
    known = {u["name"] for u in ups} | set(data.get("models", {}))
    wanted = set().union(*(_names(r) for r in data.get("models", {}).values()))
    for name in sorted(wanted - known):
        ups.append(
            {"name": name, "kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": name}
        )
    config = parse_config(data, root=tmp_path)
    assert config.upstreams or config.models, where


def test_every_relative_link_points_at_a_file() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
