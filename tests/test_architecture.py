"""The stages import one way, and no module imports itself back.

The order is the `stages` layers contract in pyproject.toml (`[tool.importlinter]`): an upper
stage may import a lower one, never the reverse; function-local and TYPE_CHECKING imports
count like any other. `lint-imports` checks it here as a developer runs it. The cycle check
reads the same import graph (grimp, import-linter's) and refuses any circle of modules in
gateway/ and evals/. A planted upward import in a copy of the tree shows the contract fails.
"""

from __future__ import annotations

import ast
import graphlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "evals")
# Circles known and owned by work in flight; each edge is left out of the cycle check.
# Empty this at merge.
ALLOWED_CIRCLE_EDGES: set[tuple[str, str]] = set()  # none: every circle is a failure


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the packages under `root`, with the repository's contract."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))",
            str(REPO / "pyproject.toml"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def first_cycle(graph: grimp.ImportGraph) -> tuple[str, ...] | None:
    """One circle of imports among the product's modules (the allowed edges left out)."""
    modules = set(graph.modules)
    edges = {
        m: {
            d
            for d in graph.find_modules_directly_imported_by(m)
            if d in modules and (m, d) not in ALLOWED_CIRCLE_EDGES
        }
        for m in modules
    }
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as e:
        return tuple(e.args[1])
    return None


def test_stages_import_one_way() -> None:
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 1 kept, 0 broken." in run.stdout


def test_no_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert first_cycle(graph) is None, " -> ".join(first_cycle(graph) or ())


def test_the_allowed_circles_are_still_circles() -> None:
    """An allowed edge that no longer exists is struck off the list, not kept as a blind spot."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    gone = [
        (a, b)
        for a, b in ALLOWED_CIRCLE_EDGES
        if not graph.direct_import_exists(importer=a, imported=b, as_packages=False)
    ]
    assert not gone, f"allowed but no longer imported: {gone}"


def planted_copy(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the packages' sources under tmp_path with `line` added to `module`."""
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    target = tmp_path / (module.replace(".", "/") + ".py")
    target.write_text(line + "\n")
    return tmp_path


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    root = planted_copy(tmp_path, "gateway.ledger.planted", "import gateway.edge")
    run = lint_imports(root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 0 kept, 1 broken." in run.stdout
    assert "gateway.ledger.planted -> gateway.edge" in run.stdout


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    root = planted_copy(tmp_path, "gateway.ledger.planted", "import gateway.ledger.record")
    record = root / "gateway/ledger/record.py"
    record.write_text(record.read_text() + "\nimport gateway.ledger.planted  # noqa\n")
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import grimp; from tests.test_architecture import PACKAGES, first_cycle; "
            "print(' -> '.join(first_cycle(grimp.build_graph(*PACKAGES, cache_dir=None)) or ()))",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert found.stdout.split() == [
        *["gateway.ledger.planted", "->", "gateway.ledger.record", "->", "gateway.ledger.planted"]
    ] or found.stdout.split() == [
        *["gateway.ledger.record", "->", "gateway.ledger.planted", "->", "gateway.ledger.record"]
    ], found.stdout


def _sizes(package: str) -> tuple[list[str], list[str]]:
    """Modules over 400 lines and functions over 60 in `package` (migrations aside)."""
    long_modules, long_functions = [], []
    for path in sorted((REPO / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        if len(text.splitlines()) > 400:
            long_modules.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 60:
                    long_functions.append(f"{where}:{node.lineno} {node.name}: {size} lines")
    return long_modules, long_functions


@pytest.mark.parametrize("package", ["gateway", "evals", "deploy"])
def test_no_module_over_400_lines_no_function_over_60(package: str) -> None:
    assert _sizes(package) == ([], [])
