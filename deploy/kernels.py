"""What a vLLM engine really selected — attention, MoE and linear kernels, KV-cache dtype — read
back from its server log, to be recorded with the replica.

Auto-selection is where throughput is won or lost (Sqwish Labs' published "Blackwell
inference benchmarks", September 2026, found vLLM picking a W4A16 dequant kernel for a W4A4
checkpoint, 47% below FP8), and the log is the only place the
choice is written. Lines look like::

    (EngineCore_DP0 pid=207) INFO 04-19 10:02:39 [cuda.py:368] Using FLASHINFER attention
        backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].
    INFO 04-19 10:02:39 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of potential ...
    INFO 04-19 10:02:38 [__init__.py:683] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM
    INFO 04-19 10:02:00 [cache.py:247] Using fp8_e4m3 data type to store kv cache. ...

Older releases print ``Using Flash Attention backend.``; both are recognised. vLLM's CPU backend
picks its attention backend (CPU_ATTN) without logging it, so a CPU log yields only the KV-cache
layout. Categories:

    attention          the decoder's attention backend
    attention_version  the FlashAttention generation the FLASH_ATTN backend runs (2, 3, 4)
    encoder_attention  the vision/multimodal encoder's attention backend
    moe                the fused-MoE backend (detail: the expert weights' quantisation)
    moe_prepare        the MoE prepare/finalize (dispatch/combine) implementation
    linear             the dense GEMM kernel (detail: the quantisation method it serves)
    kv_cache_dtype     the KV-cache storage dtype (only logged when it is not "auto")
    kv_cache_layout    the KV-cache memory layout (vLLM's CPU backend logs it, e.g. LBHNC)
    kernel             any other "Using … kernel" line (e.g. the GDN prefill kernel)
    sampler            the top-p/top-k sampler implementation
    backend            any other "Using … backend" line
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

# vLLM's log prefix: optional "(EngineCore_DP0 pid=207) ", level, "MM-DD HH:MM:SS", "[file.py:N]".
_PREFIX = re.compile(
    r"(?:\((?P<process>[^()]*)\)\s+)?(?:DEBUG|INFO|WARNING)\s+\d\d-\d\d\s+[\d:.]+\s+"
    r"\[(?P<source>[^\]]+)\]\s+(?P<message>Using .*|Selected .*)$"
)
_QUANT = (
    r"(?:Fp8|FP8|NvFp4|NVFP4|Mxfp4|MXFP4|Mxfp8|MXFP8|Fp4|FP4|Int8|INT8|Int4|INT4|Unquantized"
    r"|W4A16|W8A8|W4A8|Bf16|BF16|CPU)"
)
_CANDIDATES = r"(?:\s+out of potential backends:\s*(?P<candidates>[\[(].*?[\])]))?"

# (category, pattern) tried in order on the message; the first match wins.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern))
    for category, pattern in (
        ("kv_cache_dtype", r"^Using (?P<selected>\S+) data type to store kv cache"),
        ("kv_cache_layout", r"^Using (?P<selected>\S+) KV cache layout"),
        (
            "moe",
            rf"^Using '?(?P<selected>[^']+?)'?\s+(?:(?P<detail>{_QUANT})\s+)?MoE backend"
            rf"{_CANDIDATES}",
        ),
        ("moe_prepare", r"^Using (?P<selected>\w*PrepareAndFinalize\w*)\s*$"),
        (
            "encoder_attention",
            r"^Using (?:backend )?(?P<selected>\S+) (?:backend )?for "
            r"(?P<detail>vit attention|MMEncoderAttention)",
        ),
        ("attention", rf"^Using (?P<selected>\S+) attention backend{_CANDIDATES}"),
        ("attention_version", r"^Using FlashAttention version (?P<selected>\d+)"),
        ("sampler", r"^Using (?P<selected>.+?) for top-p & top-k sampling"),
        ("linear", r"^(?:Using|Selected) (?P<selected>\w+Kernel\w*) for (?P<detail>[^.,]+)"),
        (
            "kernel",
            r"^Using (?P<selected>.+?) kernel(?:\s+for (?P<detail>[^.(]+?))?"
            r"(?:\s*\([^)]*\))?\.?\s*$",
        ),
        ("backend", r"^Using (?P<selected>.+?) backend(?: for (?P<detail>[^.]+))?\.?\s*$"),
    )
)
_ATTENTION_NAMES = re.compile(r"Attention|ATTN|FLASH|Flash|SDPA|XFormers|MLA|PagedAttention", re.I)


@dataclass(frozen=True)
class KernelChoice:
    """One selection the engine logged.

    Attributes:
        category: see the module docstring.
        selected: the backend or kernel name, without quotes or the ``AttentionBackendEnum.``
            prefix (``FLASHINFER``, ``MARLIN``, ``FlashInferCutlassNvFp4LinearKernel``, ``fp8``).
        detail: what it serves, when the line says (``NvFp4``, ``NVFP4 GEMM``), else "".
        candidates: the backends it was chosen from, when the line lists them.
        source: the logging site, ``file.py:line``.
        processes: every process that logged it (``EngineCore_DP0 pid=207``, ``Worker_TP1 ...``).
        message: the message as logged (first occurrence).
    """

    category: str
    selected: str
    detail: str
    candidates: tuple[str, ...]
    source: str
    processes: tuple[str, ...]
    message: str


def _candidates(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return tuple(part.strip(" '\"") for part in text.strip("[]()").split(",") if part.strip())
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else (str(value),)


def classify(message: str) -> tuple[str, dict[str, str | None]] | None:
    """The category and named groups of a ``Using …``/``Selected …`` message, or None."""
    for category, pattern in _RULES:
        match = pattern.search(message)
        if match:
            groups = match.groupdict()
            if category == "backend" and _ATTENTION_NAMES.search(groups["selected"] or ""):
                category = "attention"
            return category, groups
    return None


def parse_line(line: str) -> KernelChoice | None:
    """The selection one log line reports, or None if it reports none."""
    prefix = _PREFIX.search(line.rstrip("\r\n"))
    if not prefix:
        return None
    message = prefix["message"].strip()
    found = classify(message)
    if found is None:
        return None
    category, groups = found
    selected = (groups["selected"] or "").strip().strip("'\"").removeprefix("AttentionBackendEnum.")
    return KernelChoice(
        category=category,
        selected=selected,
        detail=(groups.get("detail") or "").strip(),
        candidates=_candidates(groups.get("candidates")),
        source=prefix["source"],
        processes=(prefix["process"],) if prefix["process"] else (),
        message=message,
    )


def parse_kernel_log(lines: str | Iterable[str]) -> list[KernelChoice]:
    """Every distinct selection in a vLLM server log, in first-seen order.

    A selection logged by several processes (tensor-parallel workers, data-parallel engines) is
    one entry listing all of them; ranks that chose differently appear as separate entries.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    seen: dict[tuple[str, str, str], KernelChoice] = {}
    for line in lines:
        choice = parse_line(line)
        if choice is None:
            continue
        key = (choice.category, choice.selected, choice.detail)
        if key not in seen:
            seen[key] = choice
        elif choice.processes and choice.processes[0] not in seen[key].processes:
            earlier = seen[key]
            seen[key] = replace(earlier, processes=earlier.processes + choice.processes)
    return list(seen.values())


def selected(choices: Iterable[KernelChoice], category: str) -> list[str]:
    """The names selected in `category`, e.g. ``["FLASHINFER"]`` for ``"attention"``."""
    return [c.selected for c in choices if c.category == category]
