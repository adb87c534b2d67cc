"""deploy.kernels against vLLM server-log excerpts in tests/deploy/data/."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.kernels import classify, parse_kernel_log, parse_line, selected
from deploy.supervisor import BACKEND_LINE

DATA = Path(__file__).parent / "data"


def log(name: str) -> str:
    return (DATA / name).read_text()


def test_tensor_parallel_log_gives_one_entry_per_choice_with_every_rank():
    choices = parse_kernel_log(log("vllm_gpu_tp2_nvfp4.log"))
    by_category = {c.category: c for c in choices}
    assert [c.category for c in choices] == [
        "kv_cache_dtype",
        "linear",
        "moe",
        "attention",
        "moe_prepare",
        "sampler",
    ]
    moe = by_category["moe"]
    assert (moe.selected, moe.detail, moe.source) == ("MARLIN", "NvFp4", "nvfp4.py:203")
    assert moe.candidates[0] == "FLASHINFER_TRTLLM" and moe.candidates[-1] == "MARLIN"
    assert moe.processes == ("Worker_TP0 pid=377", "Worker_TP1 pid=378")
    attention = by_category["attention"]
    assert attention.selected == "FLASHINFER"
    assert attention.candidates == ("FLASHINFER", "TRITON_ATTN")
    linear = by_category["linear"]
    assert (linear.selected, linear.detail) == ("FlashInferCutlassNvFp4LinearKernel", "NVFP4 GEMM")
    assert by_category["kv_cache_dtype"].selected == "fp8"
    assert by_category["kv_cache_dtype"].processes == ("APIServer pid=88",)
    assert by_category["sampler"].selected == "FlashInfer"


def test_docker_prefixed_multimodal_log():
    choices = parse_kernel_log(log("vllm_gpu_multimodal_gdn.log"))
    assert selected(choices, "kv_cache_dtype") == ["fp8_e4m3"]
    assert selected(choices, "encoder_attention") == ["FLASH_ATTN", "FLASH_ATTN"]
    assert [c.detail for c in choices if c.category == "encoder_attention"] == [
        "vit attention",
        "MMEncoderAttention",
    ]
    assert selected(choices, "kernel") == ["Triton/FLA GDN prefill"]
    assert selected(choices, "linear") == ["CutlassFP8ScaledMMLinearKernel"]
    moe = [c for c in choices if c.category == "moe"]
    assert [(c.selected, c.detail) for c in moe] == [("FLASHINFER_CUTLASS", "Fp8")]
    assert selected(choices, "attention") == ["TRITON_ATTN"]
    assert all(
        c.processes == ("EngineCore pid=190",) for c in choices if c.category != "kv_cache_dtype"
    )


def test_older_release_formats():
    choices = parse_kernel_log(log("vllm_gpu_v0_format.log"))
    assert selected(choices, "attention") == ["Flash Attention"]
    assert selected(choices, "linear") == ["MarlinLinearKernel"]
    assert [c.detail for c in choices if c.category == "linear"] == ["CompressedTensorsWNA16"]
    assert selected(choices, "kv_cache_dtype") == ["fp8"]
    kernel = [c for c in choices if c.category == "kernel"]
    assert [(c.selected, c.detail) for c in kernel] == [("Marlin", "compressed-tensors WNA16 MoE")]
    assert all(c.processes == () for c in choices)


def test_ranks_that_disagree_stay_separate():
    lines = [
        "(Worker_TP0 pid=1) INFO 01-01 00:00:00 [cuda.py:368] Using FLASHINFER attention backend"
        " out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].",
        "(Worker_TP1 pid=2) INFO 01-01 00:00:00 [cuda.py:368] Using TRITON_ATTN attention backend"
        " out of potential backends: ['TRITON_ATTN'].",
    ]
    assert selected(parse_kernel_log(lines), "attention") == ["FLASHINFER", "TRITON_ATTN"]


@pytest.mark.parametrize(
    ("message", "category", "name"),
    [
        (
            "Using AttentionBackendEnum.TRITON_ATTN backend.",
            "attention",
            "AttentionBackendEnum.TRITON_ATTN",
        ),
        ("Using CPU_MLA backend.", "attention", "CPU_MLA"),
        ("Using FLASHMLA MLA prefill backend.", "attention", "FLASHMLA MLA prefill"),
        (
            "Using TRITON Unquantized MoE backend out of potential backends:"
            " ['TRITON', 'FlashInfer CUTLASS'].",
            "moe",
            "TRITON",
        ),
        ("Using CUTLASS W4A8 MoE backend.", "moe", "CUTLASS"),
        ("Using TritonExperts MoE backend", "moe", "TritonExperts"),
        ("Using DeepEPHTPrepareAndFinalize", "moe_prepare", "DeepEPHTPrepareAndFinalize"),
        (
            "Selected MacheteLinearKernel for CompressedTensorsWNA16",
            "linear",
            "MacheteLinearKernel",
        ),
        (
            "Using fp8_e5m2 data type to store kv cache. It reduces ...",
            "kv_cache_dtype",
            "fp8_e5m2",
        ),
        (
            "Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128)",
            "kernel",
            "FlashInfer GDN prefill",
        ),
        ("Using NATIVE Mamba SSU backend.", "backend", "NATIVE Mamba SSU"),
    ],
)
def test_message_formats(message: str, category: str, name: str):
    found = classify(message)
    assert found is not None
    assert (found[0], found[1]["selected"]) == (category, name)


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) INFO 04-19 10:02:00 [model.py:1685] Using max model len 32768",
        "WARNING 04-19 10:01:49 [interface.py:686] Using 'pin_memory=False' as WSL is detected.",
        "INFO 04-19 10:03:44 [backends.py:1077] Using cache directory: /root/.cache/vllm"
        " for vLLM's torch.compile",
        "INFO 04-19 10:03:44 [utils.py:185] Using tuned LoRA kernel configs from /x/y.json.",
        "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'].",
        "(EngineCore pid=2) ERROR 04-19 10:05:27 [core.py:1132] EngineCore failed to start.",
        "",
    ],
)
def test_lines_that_report_no_selection(line: str):
    assert parse_line(line) is None


def test_captured_cpu_vllm_log():
    # vLLM 0.32 on CPU logs no attention line (CPU_ATTN is chosen silently) and no KV dtype
    # line (auto); the KV-cache layout is what it says.
    choices = parse_kernel_log(log("vllm_cpu_smollm2.log"))
    assert [(c.category, c.selected) for c in choices] == [("kv_cache_layout", "LBHNC")]
    assert choices[0].processes == ("EngineCore pid=15214",)
    assert choices[0].source == "utils.py:347"


def test_captured_h200_vllm_log_names_the_flash_attention_version():
    # vLLM 0.26.0 on an H200 (the issue-20 run), paths blanked: the backend line and the
    # FlashAttention generation it runs, each once, from the one engine process.
    text = (DATA / "vllm_h200_smollm2.log").read_text(encoding="utf-8")
    choices = {(c.category, c.selected): c for c in parse_kernel_log(text)}
    assert set(choices) == {("attention", "FLASH_ATTN"), ("attention_version", "3")}
    assert choices[("attention", "FLASH_ATTN")].candidates == (
        "FLASH_ATTN",
        "FLASHINFER",
        "TRITON_ATTN",
        "FLEX_ATTENTION",
    )
    assert choices[("attention_version", "3")].processes == ("EngineCore pid=1570",)
    kept = [line for line in text.splitlines() if BACKEND_LINE.search(line)]
    assert [parse_line(line).category for line in kept] == ["attention", "attention_version"]
