"""Every HumanEval item through the code sandbox: canonical solutions, the known tricks, timing.

    python bench/sandbox_humaneval.py                     the sandbox of this tree
    python bench/sandbox_humaneval.py --baseline OLD.py   an older evals/sandbox.py, loaded from
                                                          a file (`git show REV:evals/sandbox.py`),
                                                          run the old way: one program, exit 0
    python bench/sandbox_humaneval.py --compare OLD.py    per-item overhead only: each canonical
                                                          solution through OLD and this tree,
                                                          alternately (fair under a varying load)

For each item: the canonical solution (must pass), then each trick answer (must not pass):
an early exit (sys.exit(0), os._exit(0), raise SystemExit) and an always-equal return object.
Prints the counts, the mechanism, and the per-item wall time of the canonical runs (median,
p90, total). Sequential, one item at a time, so the times are per item on an idle machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evals.families import code as family  # noqa: E402
from evals.item import Reply  # noqa: E402
from gateway.ledger.percentile import percentile  # noqa: E402

ALWAYS_EQUAL = """
class Same:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __bool__(self): return True
    def __lt__(self, other): return False
    def __gt__(self, other): return False
    def __abs__(self): return 0
    def __sub__(self, other): return self
    __rsub__ = __sub__
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __getitem__(self, key): return self
    def __hash__(self): return 0
"""


def tricks(entry: str) -> dict[str, str]:
    head = f"def {entry}(*args, **kwargs):\n"
    return {
        "sys.exit(0)": f"import sys\n{head}    sys.exit(0)\nsys.exit(0)\n",
        "os._exit(0)": f"import os\n{head}    os._exit(0)\nos._exit(0)\n",
        "raise SystemExit": f"{head}    raise SystemExit\nraise SystemExit\n",
        "exit in body": f"import sys\n{head}    sys.exit(0)\n",
        "always-equal": f"{ALWAYS_EQUAL}\n{head}    return Same()\n",
    }


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_sandbox", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def passes(item: Any, code: str, baseline: ModuleType | None) -> bool:
    if baseline is None:
        return family.score_tests(item, Reply(f"```python\n{code}\n```")).correct
    program = f"{item.answer['prefix']}\n\n{code}\n\n{item.answer['tests']}"
    return bool(baseline.run_python(program, family.LIMITS).passed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="an older evals/sandbox.py to compare")
    parser.add_argument("--compare", type=Path, help="time an older evals/sandbox.py vs this")
    parser.add_argument("--limit", type=int, default=164, help="first N items only")
    args = parser.parse_args()
    if args.compare:
        compare(load(args.compare), family.humaneval_problems()[: args.limit])
        return
    baseline = load(args.baseline) if args.baseline else None
    problems = family.humaneval_problems()[: args.limit]
    times, failed, tricked = [], [], {name: 0 for name in tricks("f")}
    for problem in problems:
        item = family._humaneval_item(problem)
        start = time.perf_counter()
        ok = passes(item, problem["prompt"] + problem["canonical_solution"], baseline)
        times.append(time.perf_counter() - start)
        if not ok:
            failed.append(problem["task_id"])
        for name, code in tricks(problem["entry_point"]).items():
            tricked[name] += passes(item, code, baseline)
    if baseline is None:
        from evals import sandbox

        print(f"mechanism: {sandbox.isolation()}")
    else:
        print(f"baseline: {args.baseline}")
    n = len(problems)
    print(f"canonical solutions passing: {n - len(failed)}/{n} {failed or ''}")
    for name, count in tricked.items():
        print(f"trick {name!r} passing: {count}/{n}")
    print(
        f"per item (canonical): median {statistics.median(times) * 1000:.0f} ms, "
        f"p90 {percentile(times, 0.9) * 1000:.0f} ms, total {sum(times):.1f} s"
    )


def compare(baseline: ModuleType, problems: list[dict[str, Any]]) -> None:
    times: dict[str, list[float]] = {"before": [], "after": []}
    for problem in problems:
        item = family._humaneval_item(problem)
        code = problem["prompt"] + problem["canonical_solution"]
        for name, old in (("before", baseline), ("after", None)):
            start = time.perf_counter()
            assert passes(item, code, old), problem["task_id"]
            times[name].append(time.perf_counter() - start)
    for name, ts in times.items():
        print(
            f"{name}: median {statistics.median(ts) * 1000:.0f} ms, "
            f"p90 {percentile(ts, 0.9) * 1000:.0f} ms over {len(ts)} items"
        )


if __name__ == "__main__":
    main()
