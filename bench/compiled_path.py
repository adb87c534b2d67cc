"""What compiling the gateway's request path to C would buy: a copy of the tree with its hottest
modules compiled by mypyc, to run beside the interpreted tree in `gateway_perf.py`.

    python bench/compiled_path.py /tmp/plumbline-compiled     # about 2 minutes on 2 cores
    PERF_BASE_TREE=/tmp/plumbline-compiled python bench/gateway_perf.py --target direct \\
        --target plumbline --target plumbline-base --scenario open-c256 \\
        --scenario seed-2wave-quarter --seconds 6 --repeat 3 --text plain

(`plumbline-base` is then the compiled tree.) The copy is `git archive HEAD`; mypyc (it ships
with mypy, a dev dependency) and a C compiler do the rest. `MODULES` are the modules with the
most event-loop samples in `gateway_profile.py --scenario open-c256`, less those mypyc cannot
compile or that break compiled:

- `gateway/edge/doors/openai/routes.py`: FastAPI reads its handlers' signatures, which a
  compiled function does not show (`models() missing required argument 'request'`);
- `gateway/serving/outlet.py`: it steps the server's `send` coroutines by hand;
- `gateway/ledger/journal.py`: `continue` inside `try`/`finally` is not implemented;
- `gateway/serving/token_clocks.py`: the stream tap inherits from it and `PlainTokens`, and a
  compiled class has one base.

One line is changed in the copy: the upstream connection declares its parser deletable
(`__deletable__`), as mypyc requires of an attribute that is deleted.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULES = [
    f"gateway/{m}.py"
    for m in (
        "edge/access",
        "edge/connection",
        "edge/direct",
        "edge/fastpath",
        "edge/guard",
        "edge/lane",
        "edge/request",
        "edge/request_id",
        "ledger/metrics",
        "ledger/percentile",
        "ledger/quick_series",
        "serving/accounting",
        "serving/adapt",
        "serving/call",
        "serving/dialect",
        "serving/dispatch",
        "serving/first_event",
        "serving/plain_tokens",
        "serving/relay",
        "serving/reply",
        "serving/retry",
        "serving/semantics",
        "serving/shape",
        "serving/silence",
        "serving/sse",
        "serving/stream_relay",
        "serving/tap",
        "serving/upstream",
        "serving/wire",
        "trust/watchdog",
    )
]

_PARSER_HOLDER = "class Connection(asyncio.Protocol):\n"


def build(dest: Path) -> None:
    """`dest` (new or empty) becomes HEAD's tree with `MODULES` compiled in place."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty")
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    wire = dest / "gateway/serving/wire.py"
    text = wire.read_text()
    if _PARSER_HOLDER not in text:
        raise SystemExit("gateway/serving/wire.py no longer has the class this script patches")
    deletable = _PARSER_HOLDER + '    __deletable__ = ["parser"]\n'
    wire.write_text(text.replace(_PARSER_HOLDER, deletable))
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run([str(mypyc), *MODULES], cwd=dest, check=True)
    built = sorted(p.relative_to(dest) for p in dest.glob("gateway/**/*.so"))
    print(f"{len(built)} of {len(MODULES)} modules compiled in {dest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dest", type=Path, help="an empty or new folder for the compiled tree")
    build(ap.parse_args().dest)


if __name__ == "__main__":
    main()
