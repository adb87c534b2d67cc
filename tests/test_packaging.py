"""What ships where: the gateway's wheel holds the product only, the test and bench tools
(fakes, the load generator) are the plumbline-kit distribution in ./kit, and the product never
imports the kit."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("gateway", "evals", "deploy")


def _build_wheel(source: Path, out: Path) -> list[str]:
    """Build `source`'s wheel into `out` (no network, no isolation) and list its files."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["--disable-pip-version-check", "-w", str(out), str(source)],
        check=True,
        timeout=120,
    )
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_gateway_wheel_carries_no_fakes_or_load_generator(tmp_path: Path) -> None:
    # A copy of what the build reads (and ./kit, to show it is left out), so the build writes
    # nothing into the checkout.
    source = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in (*PRODUCT, "kit"):
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    files = _build_wheel(source, tmp_path / "wheel")
    tops = {name.split("/")[0] for name in files}
    assert tops == {*PRODUCT, "plumbline-0.1.0.dist-info"}
    assert "gateway/cli.py" in files and "gateway/ledger/percentile.py" in files
    assert not [n for n in files if "fakes" in n or "loadgen" in n or "plumbline_kit" in n]


def test_the_kit_wheel_carries_the_fakes_and_the_load_generator(tmp_path: Path) -> None:
    source = tmp_path / "kit"
    shutil.copytree(
        ROOT / "kit", source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    files = _build_wheel(source, tmp_path / "wheel")
    assert "plumbline_kit/fakes/upstream.py" in files
    assert "plumbline_kit/loadgen/scenario.py" in files
    assert not [n for n in files if n.startswith(PRODUCT)]


def _kit_imports(path: Path) -> list[str]:
    """The `plumbline_kit` modules `path` imports, where: 'module:line'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [f"{n}:{node.lineno}" for n in names if n.split(".")[0] == "plumbline_kit"]
    return found


def test_the_product_never_imports_the_kit() -> None:
    # `plumbline bench` is the one door to it, guarded: without the kit it says what to install
    # (tests/gateway/test_cli_bench.py).
    allowed = {ROOT / "gateway" / "cli.py": ["plumbline_kit.loadgen"]}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            imported = [i.split(":")[0] for i in _kit_imports(path)]
            assert imported == allowed.get(path, []), f"{path.relative_to(ROOT)}: {imported}"
