"""A run's folder, `<runs>/<run id>/`: `run.json` (what was asked, of which items, under which
sandbox, and the serving fingerprints once done) and `results.jsonl` (one `ItemResult` a line,
appended as items finish, so an interrupted run resumes where it stopped).

Plain blocking file work: a run the gateway schedules calls these in a thread, off the loop that
serves its requests (evals/runner.py)."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import orjson

from evals.result import ItemResult, read_results

RUN = "run.json"
RESULTS = "results.jsonl"


def begin(folder: Path, meta: dict[str, Any]) -> set[tuple[str, str]]:
    """`folder` made and its run.json written with `meta`; the (target, item) pairs it already
    has results for (a resumed run)."""
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / RESULTS
    done = {(r.target, r.item_id) for r in read_results(results)} if results.exists() else set()
    write_meta(folder, meta)
    return done


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """`meta` over what run.json holds: refused where the item set differs (a resume of other
    items); the fingerprints kept where `meta` has none."""
    path = folder / RUN
    previous = orjson.loads(path.read_bytes()) if path.exists() else {}
    if previous.get("items_digest") and previous["items_digest"] != meta["items_digest"]:
        raise ValueError("resume refused: this run's item set differs from the stored one")
    fingerprints = previous.get("fingerprints", {})
    merged = {**previous, **meta}
    if "fingerprints" not in meta and fingerprints:
        merged["fingerprints"] = fingerprints
    path.write_bytes(orjson.dumps(merged, option=orjson.OPT_INDENT_2))


def append(out: IO[bytes], line: bytes) -> None:
    """One result line to the results file, flushed (a run cut short keeps what it had)."""
    out.write(line)
    out.flush()


def load_run(folder: Path) -> tuple[dict[str, Any], list[ItemResult]]:
    """A run's run.json and its results."""
    meta = orjson.loads((folder / RUN).read_bytes())
    return meta, read_results(folder / RESULTS)
