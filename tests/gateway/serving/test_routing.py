"""Routing is pure: plain values in, an ordered list of upstream names out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.config import RouteConfig
from gateway.serving.routing import Features, UpstreamView, candidates

NOW = 1000.0


def route(policy: str = "least_outstanding", fallback: list[str] | None = None) -> RouteConfig:
    return RouteConfig(upstreams=["a", "b", "c"], policy=policy, fallback=fallback or [])


def views(**inflight: int) -> dict[str, UpstreamView]:
    return {n: UpstreamView(n, inflight=i) for n, i in inflight.items()}


def test_least_outstanding_picks_the_idlest() -> None:
    assert candidates(route(), views(a=3, b=0, c=1), Features(), NOW)[:2] == ["b", "c"]


def test_unhealthy_and_cooling_upstreams_are_skipped() -> None:
    state = views(a=0, b=0, c=5)
    state["a"] = UpstreamView("a", healthy=False)
    state["b"] = UpstreamView("b", cooling_until=NOW + 5)
    assert candidates(route(), state, Features(), NOW) == ["c"]


def test_fallback_comes_after_primaries_and_only_when_available() -> None:
    state = views(a=0, b=0, c=0, api=0)
    state["a"] = UpstreamView("a", healthy=False)
    r = RouteConfig(upstreams=["a", "b"], fallback=["api"])
    assert candidates(r, state, Features(), NOW) == ["b", "api"]


def test_saturated_replicas_overflow_to_the_provider() -> None:
    state = {n: UpstreamView(n, inflight=4, max_inflight=4) for n in ("a", "b")}
    state["api"] = UpstreamView("api")
    r = RouteConfig(upstreams=["a", "b"], fallback=["api"])
    assert candidates(r, state, Features(), NOW) == ["api"]


def test_everything_down_still_tries_least_recently_failed_first() -> None:
    state = {
        "a": UpstreamView("a", cooling_until=NOW + 9),
        "b": UpstreamView("b", cooling_until=NOW + 2),
        "c": UpstreamView("c", healthy=False, cooling_until=NOW + 5),
    }
    assert candidates(route(), state, Features(), NOW) == ["b", "c", "a"]


def test_prefix_owner_first_unless_overloaded() -> None:
    f = Features(prefix_owner="c")
    assert candidates(route("prefix_affinity"), views(a=0, b=1, c=2), f, NOW)[0] == "c"
    assert (
        candidates(route("prefix_affinity"), views(a=0, b=1, c=20), f, NOW, overload_margin=8)[0]
        == "a"
    )


def test_session_is_sticky_and_spreads() -> None:
    state = views(a=0, b=0, c=0)
    firsts = {candidates(route(), state, Features(session=f"s{i}"), NOW)[0] for i in range(30)}
    assert firsts == {"a", "b", "c"}
    busy = views(a=9, b=0, c=4)
    assert (
        candidates(route(), state, Features(session="s1"), NOW)[0]
        == candidates(route(), busy, Features(session="s1"), NOW)[0]
    )


def test_weighted_split_follows_weights() -> None:
    state = {
        "a": UpstreamView("a", weight=9),
        "b": UpstreamView("b", weight=1),
        "c": UpstreamView("c", weight=0),
    }
    picks = [
        candidates(route("weighted"), state, Features(rand=i / 100), NOW)[0] for i in range(100)
    ]
    assert picks.count("a") == 90 and picks.count("b") == 10


names = st.sampled_from(["a", "b", "c", "d", "e"])
view = st.builds(
    UpstreamView,
    name=names,
    inflight=st.integers(0, 50),
    healthy=st.booleans(),
    cooling_until=st.floats(0, 2 * NOW),
    max_inflight=st.integers(0, 10),
)


@given(
    st.lists(view, max_size=6),
    st.lists(names, min_size=1, max_size=4, unique=True),
    st.lists(names, max_size=3, unique=True),
    st.sampled_from(["least_outstanding", "prefix_affinity", "weighted"]),
    st.floats(0, 0.999),
    st.none() | st.text(max_size=5),
    st.none() | names,
)
def test_candidates_are_configured_unique_and_available_first(
    vs, primaries, fallback, policy, rand, session, owner
) -> None:
    state = {v.name: v for v in vs}
    r = RouteConfig(upstreams=primaries, fallback=fallback, policy=policy)
    out = candidates(r, state, Features(session=session, prefix_owner=owner, rand=rand), NOW)
    assert len(out) == len(set(out))
    assert set(out) <= (set(primaries) | set(fallback)) & set(state)
    available = [n for n in out if state[n].available(NOW)]
    if available:
        assert out == available  # only available ones while any exist


def test_demoted_upstreams_go_after_healthy_ones_primaries_and_fallbacks() -> None:
    route = RouteConfig(upstreams=["a", "b"], fallback=["p", "q"])
    state = {
        "a": UpstreamView("a", inflight=0, demoted=True),
        "b": UpstreamView("b", inflight=5),
        "p": UpstreamView("p", demoted=True),
        "q": UpstreamView("q"),
    }
    assert candidates(route, state, Features(), 0.0) == ["b", "q", "a", "p"]
    # A demoted upstream is still used when it is all there is.
    alone = {"a": UpstreamView("a", demoted=True), "b": UpstreamView("b", healthy=False)}
    assert candidates(RouteConfig(upstreams=["a", "b"]), alone, Features(), 0.0)[0] == "a"


@given(st.lists(st.booleans(), min_size=1, max_size=6))
def test_demotion_only_reorders(flags: list[bool]) -> None:
    names = [f"u{i}" for i in range(len(flags))]
    state = {n: UpstreamView(n, demoted=d) for n, d in zip(names, flags, strict=True)}
    got = candidates(RouteConfig(upstreams=names), state, Features(), 0.0)
    assert sorted(got) == sorted(names)
    first_demoted = next((i for i, n in enumerate(got) if state[n].demoted), len(got))
    assert all(state[n].demoted for n in got[first_demoted:])


@given(
    healthy=st.booleans(),
    cooling=st.floats(0, 200),
    inflight=st.integers(0, 20),
    demoted=st.booleans(),
    session=st.one_of(st.none(), st.text(max_size=5)),
    policy=st.sampled_from(["least_outstanding", "prefix_affinity", "weighted"]),
)
def test_one_upstream_is_always_the_one_candidate(
    healthy: bool, cooling: float, inflight: int, demoted: bool, session: str | None, policy: str
) -> None:
    """Dispatch skips routing for a route with one upstream; this is why that is exact."""
    view = UpstreamView(
        "only", inflight, healthy, cooling_until=cooling, max_inflight=8, demoted=demoted
    )
    one = RouteConfig(upstreams=["only"], policy=policy)
    assert candidates(one, {"only": view}, Features(session=session), now=100.0) == ["only"]


# ---- the whole route decision: plan, windows, shapes, giving up ------------------------------


def test_plan_puts_the_gate_choice_first_and_a_pin_overrides_everything() -> None:
    from gateway.serving.routing import Ask, plan

    gated = RouteConfig(upstreams=["a", "b", "c"], policy="cheapest_within_floor")
    state = views(a=0, b=1, c=2)
    assert plan(gated, state, Ask(chosen="c"), NOW)[0] == "c"
    assert plan(gated, state, Ask(chosen="gone"), NOW) == ["a", "b", "c"]
    assert plan(route(), state, Ask(chosen="c"), NOW)[0] == "a"  # not a gated route
    assert plan(gated, state, Ask(pin="b", chosen="c"), NOW) == ["b"]


def test_plan_skips_upstreams_the_prompt_certainly_does_not_fit() -> None:
    import pytest

    from gateway.errors import ContextExceeded
    from gateway.serving.routing import Ask, fitting, plan

    windows = {"a": 2048, "b": None, "c": 8192}
    assert fitting(["a", "b", "c"], 2048, windows) == (["b", "c"], [("a", 2048)])
    assert fitting(["a", "b", "c"], 2047, windows) == (["a", "b", "c"], [])
    # An upstream whose tokenizer counts the prompt is left to that count at its attempt.
    assert fitting(["a", "b", "c"], 2048, windows, ["a"]) == (["a", "b", "c"], [])
    assert plan(
        route(), views(a=0, b=0, c=0), Ask(prompt_low=9000, windows=windows, counted=["c"]), NOW
    ) == ["b", "c"]
    ask = Ask(prompt_low=5000, windows=windows)
    assert plan(route(), views(a=0, b=0, c=0), ask, NOW) == ["b", "c"]
    with pytest.raises(ContextExceeded) as e:
        plan(
            route(), views(a=0, b=0, c=0), Ask(prompt_low=9000, windows=windows | {"b": 4096}), NOW
        )
    assert e.value.message.startswith("prompt is too long: 9000 tokens > 8192 maximum")
    assert "'a' serves 2048, 'b' serves 4096, 'c' serves 8192 tokens" in e.value.message


def test_a_shape_rule_replaces_the_primaries_and_keeps_the_fallbacks() -> None:
    from gateway.serving.routing import shaped
    from tests.harness import config_from

    ups = [
        {"name": n, "kind": "vllm", "base_url": f"http://127.0.0.1:1/{n}", "model": "m"}
        for n in "abcdx"
    ]
    cfg = config_from(
        {
            "upstreams": ups,
            "models": {
                "m": {
                    "upstreams": ["a", "b"],
                    "fallback": ["c", "x"],
                    "shapes": {"tools": ["x", "d"], "reasoning": "other"},
                },
                "other": {"upstreams": ["c"]},
            },
        }
    )
    tools = shaped(cfg, "m", "tools")
    assert (tools.upstreams, tools.fallback) == (["x", "d"], ["c"])
    thinking = shaped(cfg, "m", "reasoning")
    assert (thinking.upstreams, thinking.fallback) == (["c"], ["x"])
    assert shaped(cfg, "m", "default") is cfg.models["m"]
    assert shaped(cfg, "m", "structured") is cfg.models["m"]  # no rule: the route itself


def test_give_up_says_400_only_when_nothing_failed() -> None:
    from gateway.errors import AllUpstreamsFailed, Unfit, UpstreamTimeout
    from gateway.serving.routing import Tried, give_up

    unfit = Tried()
    unfit.refused(Unfit("no guided_json here"))
    assert give_up("m", unfit) is unfit.unfit[0]
    mixed = Tried()
    mixed.refused(Unfit("no guided_json here"))
    mixed.failed("b refused the connection", "connect_error")
    error = give_up("m", mixed)
    assert type(error) is AllUpstreamsFailed and "no guided_json here | b refused" in error.message
    slow = Tried()
    slow.failed("a sent no first byte", "ttft_timeout")
    assert isinstance(give_up("m", slow), UpstreamTimeout)
