"""The eval runner: a client of the gateway, through the same front door users use.

    plumbline eval run --target smollm2 --target smollm2-llamacpp --suite default

A *target* is a public model name on the gateway (a replica pool, or a provider pinned with
allow_fallbacks off). Every item goes to every target as a chat completion on the eval lane
(`x-plumbline-lane: eval`), with no token cap and a generous time budget. The gateway applies each
target's profile and reports the hash of the sampling parameters it sent; the run records it per
item so that arms sampled differently are never paired.

Outcomes: a reply is scored by the item's scorer; a request that runs out of its time budget is a
`timeout` (the model's fault: not correct); an infrastructure failure (connection refused, 5xx
after the gateway's own retries) is retried here too, then recorded as `error` — never dropped.
Why an item has no answer is kept in its own fields (`error_class`, `error`), never in
`finish_reason`, which is only the upstream's; a scorer that raises on a reply makes that item an
`error` of class `scorer`. The scorer's `detail` is kept per item. The denominator is always
every item.

A run lives in `<runs>/<run id>/` (evals/run_folder.py): `run.json` (targets, suite, seed,
item-set hash, serving fingerprints) and `results.jsonl` (one `ItemResult` per line, appended as
items finish), so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from evals import families, run_folder, sandbox
from evals.item import Item, Reply, items_digest
from evals.result import ItemResult, error_class_of
from evals.run_folder import load_run as load_run  # where the CLI and tests read a run
from evals.suite import build_items

LANE_HEADER = {"x-plumbline-lane": "eval"}
DETAIL_CHARS = 2000  # of a scorer's detail kept per item


class InfraError(Exception):
    """The gateway or an upstream failed for reasons that are not the model's."""


@dataclass
class RunSpec:
    base_url: str
    targets: list[str]
    suite: str = "default"
    seed: int = 0
    concurrency: int = 4
    timeout_s: float = 1800.0  # per request: generous; running out is the model's timeout
    # The key presented to the gateway (a client key, or the eval lane's credential): never
    # in the spec's repr.
    api_key: str = field(default="unused", repr=False)
    runs_dir: Path = Path("var/evals")
    run_id: str | None = None
    window: int | None = None  # long-context window; default: the target's served window
    max_tokens: int | None = None  # None = no cap (the default, and the honest one)
    token_counter: Callable[[str], int] | None = None
    sizes: dict[str, int | None] = field(default_factory=dict)
    # A target label may stand for a model with extra headers (e.g. an eval-lane pin of one
    # upstream: {"smollm2@smol-vllm": {"x-plumbline-upstream": "smol-vllm"}}).
    target_models: dict[str, str] = field(default_factory=dict)
    target_headers: dict[str, dict[str, str]] = field(default_factory=dict)
    # User JSONL datasets: (path, declared scorer), see evals/dataset.py.
    datasets: list[tuple[Path, str]] = field(default_factory=list)
    # Of the math family's items, this many from reasoning-gym's generators at hard settings
    # (`evals/families/math.py`; needs the reasoning-gym package).
    reasoning_gym: int = 0
    # Seconds before the first retry of an infrastructure error (doubling, at most 20 s).
    retry_wait_s: float = 1.0
    # The tripwire's verdict per target before the run (`TripwireReport.to_dict`), kept in
    # run.json; targets that failed it are not in `targets`.
    tripwire: dict[str, Any] = field(default_factory=dict)


def reply_from(chat: dict[str, Any]) -> Reply:
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = chat.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return Reply(
        content=message.get("content"),
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        finish_reason=choice.get("finish_reason"),
        tool_calls=tuple(message.get("tool_calls") or ()),
        completion_tokens=usage.get("completion_tokens"),
        reasoning_tokens=details.get("reasoning_tokens"),
    )


def said(e: openai.APIStatusError) -> str:
    """The error body's own message (the client's `message` repeats the status around it)."""
    body = e.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return e.message


class Runner:
    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.run_id = spec.run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()
        self.dir = spec.runs_dir / self.run_id
        self.client = openai.AsyncOpenAI(
            base_url=spec.base_url,
            api_key=spec.api_key,
            max_retries=0,
            timeout=openai.Timeout(spec.timeout_s, connect=10.0),
            default_headers=LANE_HEADER,
        )
        # Named here, where the runner is made (in a thread when a gateway schedules the run):
        # the OpenAI package imports a resource's modules where it is first named.
        _ = (self.client.chat.completions, self.client.models)
        self.fingerprints: dict[str, dict[str, set[str]]] = {
            t: {"upstream": set(), "provider": set(), "params_hash": set(), "engine": set()}
            for t in spec.targets
        }

    # -- one item ------------------------------------------------------------------------
    async def _ask(
        self, target: str, item: Item
    ) -> tuple[dict[str, Any], dict[str, str], float, float]:
        """The answer, its headers, its latency (s) and when it was sent (epoch s)."""
        body: dict[str, Any] = {
            "model": self.spec.target_models.get(target, target),
            "messages": list(item.messages),
        }
        if item.tools:
            body["tools"] = list(item.tools)
        if self.spec.max_tokens:
            body["max_tokens"] = self.spec.max_tokens
        sent, started = time.time(), time.perf_counter()
        try:
            raw = await self.client.chat.completions.with_raw_response.create(
                **body, extra_headers=self.spec.target_headers.get(target)
            )
        except openai.APITimeoutError:
            raise
        except openai.APIConnectionError as e:
            raise InfraError(f"connection: {e}") from None
        except openai.APIStatusError as e:
            if e.status_code >= 500 or e.status_code == 429:
                raise InfraError(f"HTTP {e.status_code}: {said(e)}") from None
            raise
        elapsed = time.perf_counter() - started
        return orjson.loads(raw.content), dict(raw.headers), elapsed, sent

    async def run_item(self, target: str, item: Item) -> ItemResult:
        base: dict[str, Any] = {
            "target": target,
            "item_id": item.id,
            "item_digest": item.digest(),
            "family": item.family,
            "run": self.run_id,
            "started": time.time(),
        }
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(3),
                wait=wait_exponential(multiplier=self.spec.retry_wait_s, max=20),
                retry=retry_if_exception_type(InfraError),
                reraise=True,
            ):
                with attempt:
                    chat, headers, elapsed, sent = await self._ask(target, item)
        except openai.APITimeoutError:
            return ItemResult(
                **base,
                outcome="timeout",
                latency_s=self.spec.timeout_s,
                error_class="timeout",
                error=f"no answer within {self.spec.timeout_s:g} s",
            )
        except InfraError as e:
            message = str(e)[:500]
            return ItemResult(
                **base, outcome="error", error_class=error_class_of(message), error=message
            )
        except openai.APIStatusError as e:
            # A 4xx for this item (e.g. the prompt exceeds the window): recorded, not dropped.
            return ItemResult(
                **base,
                outcome="error",
                error_class=f"http_{e.status_code}",
                error=f"HTTP {e.status_code}: {said(e)}"[:500],
            )
        reply = reply_from(chat)
        answered = self._answered(target, base, chat, headers, elapsed, sent)
        try:
            verdict = await asyncio.to_thread(families.score, item, reply)
        except Exception as e:  # a scorer that fails on one reply: that item errs, the run goes on
            return ItemResult(
                **answered,
                outcome="error",
                error_class=getattr(e, "error_class", "scorer"),  # e.g. sandbox_refused
                error=f"{type(e).__name__}: {e}"[:500],
            )
        return ItemResult(
            **answered,
            outcome=verdict.outcome,
            parts=dict(verdict.parts),
            detail=verdict.detail[:DETAIL_CHARS],
        )

    def _answered(
        self,
        target: str,
        base: dict[str, Any],
        chat: dict[str, Any],
        headers: Mapping[str, str],
        elapsed: float,
        sent: float,
    ) -> dict[str, Any]:
        """An answered item's result fields (its score aside), from the reply and the gateway's
        headers; the target's fingerprints (upstream, provider, params, engine) noted."""
        reply = reply_from(chat)
        fp = self.fingerprints[target]
        for key, header in (
            ("upstream", "x-plumbline-upstream"),
            ("provider", "x-plumbline-provider"),
            ("params_hash", "x-plumbline-params-hash"),
            ("engine", "x-plumbline-engine"),
        ):
            if headers.get(header):
                fp[key].add(headers[header])
        cost = headers.get("x-plumbline-cost-usd")
        return {
            **base,
            "started": sent,  # the attempt that was answered (a retried item's last)
            "finish_reason": reply.finish_reason,
            "output_tokens": reply.completion_tokens,
            "reasoning_tokens": reply.reasoning_tokens,
            "prompt_tokens": (chat.get("usage") or {}).get("prompt_tokens"),
            "latency_s": round(elapsed, 4),
            "cost": float(cost) if cost else None,
            "cost_basis": "price" if cost else "",
            "params_hash": headers.get("x-plumbline-params-hash", ""),
            "reasoning_leak": headers.get("x-plumbline-reasoning-leak") == "true",
            "engine": headers.get("x-plumbline-engine", ""),
            "upstream": headers.get("x-plumbline-upstream", ""),
            "semantics": headers.get("x-plumbline-semantics", ""),
            "unsent": headers.get("x-plumbline-unsent", ""),
            "accepted": headers.get("x-plumbline-accepted-unequal", ""),
        }

    # -- the whole run -------------------------------------------------------------------
    async def served_window(self, target: str) -> int | None:
        models = await self.client.models.list()
        name = self.spec.target_models.get(target, target)
        for model in models.data:
            if model.id == name:
                return (model.model_extra or {}).get("max_model_len")
        raise ValueError(f"target {target!r} is not a model on the gateway at {self.spec.base_url}")

    async def run(self, progress: Progress | None = None) -> Path:
        spec = self.spec
        windows = [await self.served_window(t) for t in spec.targets]
        window = spec.window or min((w for w in windows if w), default=None)
        # Off the event loop: a run the gateway schedules shares its loop with the requests it
        # serves, and generating a suite's items (the math family's brute-force checks among
        # them) held that loop over a second at once.
        items = await asyncio.to_thread(
            build_items,
            spec.suite,
            spec.seed,
            window,
            spec.token_counter,
            spec.sizes,
            spec.datasets,
            spec.reasoning_gym,
        )
        # The run's files, and the sandbox probe that `_meta` may start (a confined child, up to
        # its wall limit), in threads too: a disk that holds a write (dirty pages throttled on a
        # busy machine) would hold the serving loop with it.
        meta = await asyncio.to_thread(self._meta, items, window)
        done = await asyncio.to_thread(run_folder.begin, self.dir, meta)
        todo = [(t, i) for t in spec.targets for i in items if (t, i.id) not in done]
        gate = asyncio.Semaphore(spec.concurrency)
        task_id = (
            progress.add_task(
                f"eval {self.run_id}", total=len(items) * len(spec.targets), completed=len(done)
            )
            if progress
            else None
        )
        out = await asyncio.to_thread((self.dir / run_folder.RESULTS).open, "ab")
        try:

            async def one(target: str, item: Item) -> None:
                async with gate:
                    result = await self.run_item(target, item)
                line = orjson.dumps(result.to_dict()) + b"\n"
                await asyncio.to_thread(run_folder.append, out, line)
                if progress is not None and task_id is not None:
                    progress.advance(task_id)

            await asyncio.gather(*(one(t, i) for t, i in todo))
        finally:
            await asyncio.to_thread(out.close)
        meta["finished"] = time.time()
        meta["fingerprints"] = {
            t: {k: sorted(v) for k, v in fp.items()} for t, fp in self.fingerprints.items()
        }
        await asyncio.to_thread(run_folder.write_meta, self.dir, meta)
        await self.client.close()
        return self.dir

    def _meta(self, items: list[Item], window: int | None) -> dict[str, Any]:
        """run.json as the run starts: what was asked, of which items, under which sandbox."""
        spec = self.spec
        return {
            "run": self.run_id,
            "targets": spec.targets,
            "suite": spec.suite,
            "seed": spec.seed,
            "reasoning_gym": spec.reasoning_gym,
            "items": len(items),
            "items_digest": items_digest(items),
            "datasets": [
                {
                    "path": str(path),
                    "scorer": scorer,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                }
                for path, scorer in spec.datasets
            ],
            "window": window,
            "max_tokens": spec.max_tokens,
            "timeout_s": spec.timeout_s,
            # What code items run under here (or why they are refused), see docs/sandbox.md.
            "sandbox": sandbox.describe(),
            "started": time.time(),
            **({"tripwire": spec.tripwire} if spec.tripwire else {}),
        }


def run(spec: RunSpec, show_progress: bool = True) -> Path:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    if not show_progress:
        return asyncio.run(Runner(spec).run())
    with Progress(*columns) as progress:
        return asyncio.run(Runner(spec).run(progress))


@lru_cache(maxsize=4096)
def _count_cached(url: str, model: str, text: str) -> int:
    response = httpx.post(url, json={"model": model, "prompt": text}, timeout=30)
    response.raise_for_status()
    return int(response.json()["count"])


def tokenizer_counter(root_url: str, model: str) -> Callable[[str], int]:
    """Count tokens with a vLLM server's own tokenizer (`POST /tokenize`)."""
    url = root_url.rstrip("/") + "/tokenize"
    return lambda text: _count_cached(url, model, text)


def targets_summary(results: Sequence[ItemResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.target] = counts.get(r.target, 0) + 1
    return counts
