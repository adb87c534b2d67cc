"""Is the installed llama.cpp build portable? (`python -m deploy.llamacpp` exits 0 when it is.)

llama-cpp-python compiles llama.cpp when it is installed. A ``-march=native`` build carries the
instructions of the machine it was built on: on a host whose CPU advertises AMX, ggml uses
``tileloadd``, which dies with SIGILL where the kernel or hypervisor does not grant the tile
state, and a wheel built and cached on one machine family is wrong on another. ``deploy/install.sh``
builds it for the x86-64-v3 baseline (AVX2, FMA, F16C) and rebuilds any build that reports a
feature beyond that baseline.
"""

from __future__ import annotations

import re
import sys

# Features a portable build must not have been compiled with (llama_print_system_info's names).
BEYOND_BASELINE = ("AMX_INT8", "AMX_BF16", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")


def compiled_features(system_info: str) -> set[str]:
    """The features `llama_print_system_info()` says this build uses (``NAME = 1``)."""
    return {name for name, on in re.findall(r"([A-Z0-9_]+) = (\d)", system_info) if on == "1"}


def beyond_baseline(system_info: str) -> list[str]:
    """The features of `system_info` a portable build must not have, sorted."""
    return sorted(compiled_features(system_info) & set(BEYOND_BASELINE))


def system_info() -> str:
    """The installed llama-cpp-python's own report of how llama.cpp was compiled."""
    import llama_cpp

    raw = llama_cpp.llama_print_system_info()
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def main() -> int:
    try:
        info = system_info()
    except Exception as exc:  # not installed, or it cannot load
        print(f"llama.cpp: not usable ({exc})", file=sys.stderr)
        return 1
    extra = beyond_baseline(info)
    if extra:
        print(f"llama.cpp: built with {', '.join(extra)}; not portable", file=sys.stderr)
        return 1
    print("llama.cpp: portable build")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
