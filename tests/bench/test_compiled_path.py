"""The compiled-path bench (bench/compiled_path.py) still names what it compiles: every module
exists, and the one class it patches in its copy is where it looks for it."""

from __future__ import annotations

from pathlib import Path

from bench.compiled_path import _PARSER_HOLDER, MODULES

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_it_compiles_exists_once() -> None:
    assert len(set(MODULES)) == len(MODULES)
    assert [m for m in MODULES if not (ROOT / m).is_file()] == []


def test_the_class_it_patches_is_in_the_wire_module() -> None:
    assert (ROOT / "gateway/serving/wire.py").read_text().count(_PARSER_HOLDER) == 1
