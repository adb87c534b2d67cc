"""Server-side numbers: vLLM's latency histograms scraped from Prometheus ``/metrics``.

A run scrapes its target's metrics URLs right before its measured requests (after the warm-up)
and right after them; the difference of each histogram's ``_sum`` and ``_count``, summed over
label sets and over the URLs given for the target, is that run's server-side mean. Through a
gateway the URLs to give are those of the vLLM replicas it fronts: the means then say whether a
slowdown is the relay's or vLLM's own.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# ServerSide field -> the vLLM histograms feeding it, newest name first (the first present wins).
HISTOGRAMS: Mapping[str, tuple[str, ...]] = {
    "srv_ttft_mean_ms": ("vllm:time_to_first_token_seconds",),
    "srv_itl_mean_ms": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ),
    "srv_e2e_mean_ms": ("vllm:e2e_request_latency_seconds",),
    "srv_queue_mean_ms": ("vllm:request_queue_time_seconds",),
    "srv_prefill_mean_ms": ("vllm:request_prefill_time_seconds",),
    "srv_decode_mean_ms": ("vllm:request_decode_time_seconds",),
}
_WANTED = frozenset(name for names in HISTOGRAMS.values() for name in names)
# Requests the server finished during the run: the count of the first of these present.
_REQUESTS = ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds")

Snapshot = dict[str, tuple[float, float]]  # histogram name -> (sum, count)


def parse_server_metrics(texts: Sequence[str], labels: Sequence[str]) -> dict[str, list[str]]:
    """``--server-metrics`` values (``URL`` or ``LABEL=URL``, repeatable) -> URLs per target.

    A bare URL applies to every target; a label repeated sums its URLs (a gateway in front of
    several replicas). Raises ValueError for a label that is not a target or a non-http URL.
    """
    out: dict[str, list[str]] = {label: [] for label in labels}
    for text in texts:
        if text.startswith(("http://", "https://")):
            label, url = "", text
        else:
            label, _, url = text.partition("=")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--server-metrics {text!r}: expected URL or LABEL=URL (http)")
        if label and label not in out:
            known = ", ".join(labels)
            raise ValueError(f"--server-metrics {text!r}: no target labelled {label!r} ({known})")
        for key in [label] if label else labels:
            out[key].append(url)
    return {label: urls for label, urls in out.items() if urls}


def histograms(text: str) -> Snapshot:
    """The `HISTOGRAMS` found in one exposition text: (sum, count), label sets added up."""
    found: Snapshot = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            base, _, part = sample.name.rpartition("_")
            if base not in _WANTED or part not in ("sum", "count"):
                continue
            total, count = found.get(base, (0.0, 0.0))
            if part == "sum":
                total += sample.value
            else:
                count += sample.value
            found[base] = (total, count)
    return found


def add(snapshots: Iterable[Snapshot]) -> Snapshot:
    """Several servers' snapshots as one (their sums and counts added)."""
    out: Snapshot = {}
    for snap in snapshots:
        for name, (total, count) in snap.items():
            s, c = out.get(name, (0.0, 0.0))
            out[name] = (s + total, c + count)
    return out


@dataclass(frozen=True)
class ServerSide:
    """A run's server-side numbers; the field names are the row's columns."""

    srv_requests: int = -1  # requests the server finished during the run; -1: unknown
    srv_ttft_mean_ms: float = math.nan
    srv_itl_mean_ms: float = math.nan
    srv_e2e_mean_ms: float = math.nan
    srv_queue_mean_ms: float = math.nan
    srv_prefill_mean_ms: float = math.nan
    srv_decode_mean_ms: float = math.nan


def server_means(before: Snapshot, after: Snapshot) -> ServerSide:
    """Each histogram's mean over the interval between two snapshots (ms): NaN where it is
    missing, saw no observation, or went backwards (a restarted server)."""

    def delta(name: str) -> tuple[float, float] | None:
        if name not in before or name not in after:
            return None
        d_sum, d_count = after[name][0] - before[name][0], after[name][1] - before[name][1]
        return (d_sum, d_count) if d_count >= 0 and d_sum >= 0 else None

    means: dict[str, float] = {}
    for field, names in HISTOGRAMS.items():
        means[field] = math.nan
        for name in names:
            if (d := delta(name)) is not None:
                means[field] = round(d[0] / d[1] * 1000, 3) if d[1] > 0 else math.nan
                break
    requests = next((d for name in _REQUESTS if (d := delta(name)) is not None), None)
    return ServerSide(srv_requests=int(requests[1]) if requests else -1, **means)


@dataclass(frozen=True)
class Scraper:
    """Reads one target's metrics URLs; `probe` first, so a wrong URL fails before the run."""

    urls: Sequence[str]
    timeout_s: float = 10.0

    async def snapshot(self, session: aiohttp.ClientSession) -> Snapshot:
        """All URLs read concurrently and added; raises on an unreachable URL or a bad answer."""

        async def one(url: str) -> Snapshot:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with session.get(url, timeout=timeout) as resp:
                resp.raise_for_status()
                return histograms(await resp.text())

        return add(await asyncio.gather(*(one(url) for url in self.urls)))

    async def probe(self, session: aiohttp.ClientSession) -> None:
        """Raise ValueError when a URL cannot be read or holds none of the vLLM histograms."""
        for url in self.urls:
            try:
                found = await Scraper([url], self.timeout_s).snapshot(session)
            except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                raise ValueError(f"server metrics {url}: {type(exc).__name__}: {exc}") from exc
            if not found:
                raise ValueError(
                    f"server metrics {url}: none of {', '.join(sorted(_WANTED))} (not vLLM?)"
                )
