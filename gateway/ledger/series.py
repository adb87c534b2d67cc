"""The gateway's Prometheus series, declared: names, help texts, labels, buckets (`Metrics`, in
gateway/ledger/metrics.py, observes records into them; docs/metrics.md is written from them).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
QUEUE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 5)


class Series:
    """Every series on `registry`, grouped: request counters, attempt counters, latency
    histograms, gauges."""

    registry: CollectorRegistry

    def _define(self) -> None:
        self._request_counters()
        self._attempt_counters()
        self._latency_histograms()
        self._gauges()

    def _request_counters(self) -> None:
        """What the requests were: outcomes, tokens, cost, truncations, leaks, estimates."""
        r = self.registry
        mu = ("model", "upstream", "lane")  # lane: client | eval | shadow (record.LANES)
        self.requests = Counter(
            "gateway_requests",
            "Client requests by how they ended.",
            [*mu, "provider", "outcome"],
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens by kind (cached is part of prompt, reasoning part of completion).",
            [*mu, "kind"],
            registry=r,
        )
        self.cost = Counter(
            "gateway_cost_usd", "Cost computed from the price table.", mu, registry=r
        )
        self.charged = Counter(
            "gateway_charged_cost_usd",
            "Cost the provider reported charging (usage.cost).",
            mu,
            registry=r,
        )
        self.drift = Counter(
            "gateway_cost_drift",
            "Requests whose charged cost differs from "
            "the computed one by more than the price's drift threshold.",
            mu,
            registry=r,
        )
        self.truncations = Counter(
            "gateway_truncations",
            "Responses cut off by a token limit, by cause: client_cap (the completion reached the "
            "cap the request carried) or upstream (the server stopped it short of any cap: its "
            "own limit or its context window).",
            [*mu, "cause"],
            registry=r,
        )
        self.leaks = Counter(
            "gateway_reasoning_leaks",
            "Responses with reasoning leaked into the answer.",
            mu,
            registry=r,
        )
        self.estimated = Counter(
            "gateway_usage_estimated",
            "Requests whose token counts were counted by the gateway, not reported.",
            mu,
            registry=r,
        )

    def _attempt_counters(self) -> None:
        """How the requests were served: attempts, retries, fallbacks, errors, what a door
        dropped or clamped, task shapes."""
        r = self.registry
        mu = ("model", "upstream", "lane")  # lane: client | eval | shadow (record.LANES)
        self.attempts = Counter(
            "gateway_attempts", "HTTP calls to upstreams, by outcome.", [*mu, "outcome"], registry=r
        )
        self.retries = Counter(
            "gateway_retries", "Attempts repeating the previous upstream.", mu, registry=r
        )
        self.fallbacks = Counter(
            "gateway_fallbacks",
            "Attempts moving to another upstream (labelled by the one moved to).",
            mu,
            registry=r,
        )
        self.errors = Counter(
            "gateway_errors", "Failed requests by error class.", [*mu, "error_class"], registry=r
        )
        self.dropped = Counter(
            "gateway_dropped_fields",
            "Request fields a front door dropped and marked (x-plumbline-dropped): "
            "a hosted tool, say, that the gateway cannot serve.",
            ["model", "door", "field"],
            registry=r,
        )
        self.clamped = Counter(
            "gateway_clamped",
            "Requests whose max_tokens / max_completion_tokens was clamped to the chosen "
            "upstream's context window (x-plumbline-clamped; gateway/serving/adapt.py).",
            [*mu, "field"],
            registry=r,
        )
        self.shaped = Counter(
            "gateway_shape_requests",
            "Client requests by task shape (gateway/serving/shape.py: tools, long_context, edit, "
            'structured, reasoning, default; "none" where the request never reached routing).',
            [*mu, "shape"],
            registry=r,
        )
        self.rejected = Counter(
            "gateway_rejected_requests",
            "Requests refused before they had a record, by door, reason (gateway/ledger/rejection"
            '.py) and route asked for ("unknown": not configured, "none": no model read).',
            ["door", "reason", "model"],
            registry=r,
        )

    def _latency_histograms(self) -> None:
        """Queueing, first token, first answer token, end to end, inter-token."""
        r = self.registry
        mu = ("model", "upstream", "lane")  # lane: client | eval | shadow (record.LANES)
        self.queue = Histogram(
            "gateway_queue_seconds",
            "Accept to first upstream dispatch.",
            mu,
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gateway_ttft_seconds",
            "Accept to first token (reasoning or answer), of streamed requests (a whole answer's "
            "first token comes with its last: gateway_e2e_seconds).",
            mu,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfa = Histogram(
            "gateway_ttfa_seconds",
            "Accept to first answer token (after reasoning), of streamed requests.",
            mu,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "gateway_e2e_seconds", "Accept to last byte.", mu, buckets=LATENCY_BUCKETS, registry=r
        )
        self.itl = Histogram(
            "gateway_inter_token_seconds",
            "Mean inter-token latency of each streamed request.",
            mu,
            buckets=ITL_BUCKETS,
            registry=r,
        )

    def _gauges(self) -> None:
        """What is true now: in flight, upstream health, cost per million tokens, API/node."""
        r = self.registry
        self.inflight_gauge = Gauge(
            "gateway_inflight_requests",
            "Requests in flight.",
            ["upstream"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.health = Gauge(
            "gateway_upstream_up",
            "1 if the upstream passes health checks.",
            ["upstream"],
            multiprocess_mode="livemostrecent",
            registry=r,
        )
        self.cost_per_m = Gauge(
            "gateway_cost_per_million_tokens_usd",
            "Cost per million tokens served, on the node and at the API's price for the same "
            "tokens, over the last 24 h of rolled-up 5-minute buckets (a few minutes behind the "
            "clock).",
            ["model", "side"],
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.ratio = Gauge(
            "gateway_api_node_cost_ratio",
            "API cost / node cost for the tokens the node served, over the same 24 h.",
            ["model"],
            multiprocess_mode="mostrecent",
            registry=r,
        )
