"""deploy.llamacpp: is the installed llama.cpp build portable? (llama_print_system_info parsed)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy import llamacpp

# What llama_print_system_info() says for the portable build install.sh makes (this machine's).
PORTABLE = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
# A -march=native build on a Sapphire Rapids host: AVX-512 and AMX compiled in.
NATIVE_AMX = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)


def test_features_are_the_ones_set_to_1() -> None:
    assert llamacpp.compiled_features(PORTABLE) == {
        "SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP", "REPACK",
    }  # fmt: skip
    assert llamacpp.compiled_features("AVX512 = 0 | AMX_INT8 = 0 | AVX2 = 1") == {"AVX2"}
    assert llamacpp.compiled_features("") == set()


def test_portable_build_has_nothing_beyond_the_baseline() -> None:
    assert llamacpp.beyond_baseline(PORTABLE) == []
    assert llamacpp.beyond_baseline("AVX512 = 0 | AMX_INT8 = 0 | AMX_BF16 = 0") == []


def test_native_amx_build_is_named_feature_by_feature() -> None:
    assert llamacpp.beyond_baseline(NATIVE_AMX) == [
        "AMX_INT8", "AVX512", "AVX512_BF16", "AVX512_VBMI", "AVX512_VNNI",
    ]  # fmt: skip
    assert llamacpp.beyond_baseline("CPU : AMX_BF16 = 1 |") == ["AMX_BF16"]


def test_the_check_refuses_a_native_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(llamacpp, "system_info", lambda: NATIVE_AMX)
    assert llamacpp.main() == 1
    assert "built with AMX_INT8, AVX512" in capsys.readouterr().err


def test_the_check_says_when_llama_cpp_cannot_load(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> str:
        raise ImportError("No module named 'llama_cpp'")

    monkeypatch.setattr(llamacpp, "system_info", missing)
    assert llamacpp.main() == 1
    assert "not usable" in capsys.readouterr().err


def test_the_installed_build_is_portable() -> None:
    """What install.sh promises: a build for the x86-64-v3 baseline, no AVX-512, no AMX (the
    native build died with SIGILL in tileloadd on its first prompt of a few hundred tokens)."""
    info = llamacpp.system_info()
    assert "AVX2 = 1" in info
    assert llamacpp.beyond_baseline(info) == []
    done = subprocess.run(
        [sys.executable, "-m", "deploy.llamacpp"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "llama.cpp: portable build"
