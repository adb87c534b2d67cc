"""Access end to end: keys, roles, allow-lists and budgets through a real gateway and fake upstream,
and the budget statement racing itself on SQLite and on one PostgreSQL shared by two "gateways"."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gateway.config import Config
from gateway.edge.access import Access, Key, hash_key
from gateway.edge.app import create_app
from gateway.ledger.database import migrate
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway import pg
from tests.harness import ListSink, config_from
from tests.harness import serving_app as serving

CLIENT, OTHER, ADMIN, SCRAPER = "pl-client-key-1", "pl-client-key-2", "pl-admin-key", "pl-scrape"
MESSAGES = [{"role": "user", "content": "hello there"}]


def config_with(fake_url: str, keys: list[dict[str, Any]] | None = None, **access: Any) -> Config:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                {"name": "a", "kind": "vllm", "base_url": fake_url, "model": "fake-model"}
            ],
            "models": {"smol": {"upstreams": ["a"]}, "big": {"upstreams": ["a"]}},
            "access": {"keys": keys or [], **access},
        }
    )


def key(id: str, plaintext: str, **kw: Any) -> dict[str, Any]:
    return {"id": id, "sha256": hash_key(plaintext), **kw}


# A minute into an hour-long budget window: a fixed clock, so no window turns over mid-test.
IN_A_WINDOW = 1_800_000_000.0 + 60


def guarded_app(config: Config, sinks: list[Any], access: Access | None = None) -> Any:
    """The app with a given Access (the factory wires guard, sink and admin routes)."""
    return create_app(config, sinks=sinks, record=False, access=access)


def chat(
    root: str, headers: dict[str, str] | None = None, model: str = "smol", **body: Any
) -> httpx.Response:
    return httpx.post(
        f"{root}/v1/chat/completions",
        headers=headers or {},
        timeout=10,
        json={"model": model, "messages": MESSAGES, **body},
    )


def bearer(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


def assert_error(resp: httpx.Response, status: int, type_: str, words: str) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["type"] == type_
    assert words.lower() in err["message"].lower()


def test_without_keys_the_gateway_is_open(fake: FakeHandle) -> None:
    config = config_with(fake.base_url)
    assert config.access.open
    sink = ListSink()
    with serving(guarded_app(config, [sink])) as root:
        assert chat(root).status_code == 200
        # Admin routes are never open: they need an admin key even on an open gateway.
        assert_error(httpx.get(f"{root}/admin/keys"), 401, "authentication_error", "api key")
    assert [r.key_id for r in sink.records] == [None]


def test_keys_roles_and_the_record_carries_only_the_key_id(fake: FakeHandle) -> None:
    config = config_with(fake.base_url, [key("alice", CLIENT), key("ops", ADMIN, role="admin")])
    sink = ListSink()
    with serving(guarded_app(config, [sink])) as root:
        assert_error(chat(root), 401, "authentication_error", "missing api key")
        assert_error(chat(root, bearer("pl-wrong")), 401, "authentication_error", "invalid")
        assert chat(root, bearer(CLIENT)).status_code == 200
        assert chat(root, {"x-api-key": CLIENT}).status_code == 200
        assert httpx.get(f"{root}/v1/models", headers=bearer(CLIENT)).status_code == 200
        assert httpx.get(f"{root}/v1/models").status_code == 401
        assert httpx.get(f"{root}/health").status_code == 200
        assert_error(chat(root, bearer(ADMIN)), 403, "permission_error", "admin key")
        assert_error(
            httpx.get(f"{root}/admin/keys", headers=bearer(CLIENT)),
            403,
            "permission_error",
            "admin",
        )
        listed = httpx.get(f"{root}/admin/keys", headers=bearer(ADMIN))
    assert listed.status_code == 200
    assert {k["id"] for k in listed.json()["data"]} == {"alice", "ops"}
    assert hash_key(CLIENT) not in listed.text and CLIENT not in listed.text
    assert [r.key_id for r in sink.records] == ["alice", "alice"]


def test_model_allow_list(fake: FakeHandle) -> None:
    config = config_with(fake.base_url, [key("alice", CLIENT, models=["smol"])])
    with serving(guarded_app(config, [])) as root:
        assert chat(root, bearer(CLIENT), model="smol").status_code == 200
        denied = chat(root, bearer(CLIENT), model="big")
        assert_error(denied, 403, "permission_error", "may not use the model 'big'")
        assert denied.json()["error"]["param"] == "model"
    assert len(fake.requests()) == 1


def test_a_body_the_guard_read_is_the_body_relayed(fake: FakeHandle) -> None:
    """An allow-listed key's body is read by the guard (to check the model) and handed to the
    handler as parsed: what reaches the upstream is what was sent, and a body that is not JSON,
    not an object or nested too deep is refused by the handler as for any other key."""
    config = config_with(fake.base_url, [key("alice", CLIENT, models=["smol"])])
    with serving(guarded_app(config, [])) as root:
        with httpx.stream(
            "POST",
            f"{root}/v1/chat/completions",
            headers=bearer(CLIENT),
            json={"model": "smol", "messages": MESSAGES, "stream": True, "seed": 7},
            timeout=10,
        ) as streamed:
            assert streamed.status_code == 200
            assert b"data: [DONE]" in streamed.read()
        url, heads = f"{root}/v1/chat/completions", {**bearer(CLIENT), "content-type": "x"}
        for raw, words in (
            (b"{not json", "not valid JSON"),
            (b"[1, 2]", "must be a JSON object"),
            (b'{"model": "smol", "x": ' + b"[" * 70 + b"]" * 70 + b"}", "nested more than"),
        ):
            assert_error(
                httpx.post(url, headers=heads, content=raw), 400, "invalid_request_error", words
            )
    sent = [r["body"] for r in fake.requests()]
    assert len(sent) == 1
    assert sent[0]["messages"] == MESSAGES and sent[0]["seed"] == 7 and sent[0]["stream"]


def test_request_budget_holds_under_concurrency(fake: FakeHandle) -> None:
    fake.set_default(pace_tps=50, tokens=3)  # slow enough that all requests overlap
    config = config_with(
        fake.base_url, [key("alice", CLIENT, requests_per_window=5, window_s=3600)]
    )

    async def burst(root: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=20) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        f"{root}/v1/chat/completions",
                        headers=bearer(CLIENT),
                        json={"model": "smol", "messages": MESSAGES},
                    )
                    for _ in range(20)
                )
            )

    access = Access(config.access, clock=lambda: IN_A_WINDOW)
    with serving(guarded_app(config, [], access)) as root:
        replies = asyncio.run(burst(root))
    codes = sorted(r.status_code for r in replies)
    assert codes == [200] * 5 + [429] * 15
    limited = next(r for r in replies if r.status_code == 429)
    assert_error(limited, 429, "rate_limit_error", "5 requests per 3600s")
    assert int(limited.headers["retry-after"]) == 3600 - 60  # the window's rest
    assert len(fake.requests()) == 5


def test_token_budget_reserves_then_settles_with_counted_tokens(fake: FakeHandle) -> None:
    fake.set_default(tokens=7)
    config = config_with(
        fake.base_url, [key("alice", CLIENT, tokens_per_window=100, window_s=3600)]
    )
    sink = ListSink()
    access = Access(config.access, clock=lambda: IN_A_WINDOW)
    with serving(guarded_app(config, [sink], access)) as root:
        replies = [chat(root, bearer(CLIENT), max_tokens=50).status_code for _ in range(8)]
        requests, tokens = access.usage("alice", int(IN_A_WINDOW // 3600 * 3600))
    used = sum(r.prompt_tokens + r.completion_tokens for r in sink.records)
    # Settled counters equal what the records counted; reservations (~50+ tokens each) stop
    # admission before the settled total reaches the budget.
    assert tokens == used and used <= 100
    assert replies.count(200) == len(sink.records) == requests
    assert 429 in replies and replies.index(429) == replies.count(200)


def test_admin_creates_a_key_shown_once_and_revokes_it(fake: FakeHandle) -> None:
    config = config_with(fake.base_url, [key("ops", ADMIN, role="admin")], store_keys=True)
    with serving(guarded_app(config, [])) as root:
        created = httpx.post(
            f"{root}/admin/keys",
            headers=bearer(ADMIN),
            json={"id": "bob", "models": ["smol"], "requests_per_window": 100},
        )
        assert created.status_code == 201, created.text
        plaintext = created.json()["key"]
        assert chat(root, bearer(plaintext)).status_code == 200
        assert_error(chat(root, bearer(plaintext), model="big"), 403, "permission_error", "big")
        again = httpx.post(f"{root}/admin/keys", headers=bearer(ADMIN), json={"id": "bob"})
        assert_error(again, 409, "invalid_request_error", "exists")
        bad = httpx.post(f"{root}/admin/keys", headers=bearer(ADMIN), json={"id": "x", "role": 3})
        assert_error(bad, 400, "invalid_request_error", "role")
        listed = httpx.get(f"{root}/admin/keys", headers=bearer(ADMIN)).text
        assert plaintext not in listed and hash_key(plaintext) not in listed
        assert httpx.delete(f"{root}/admin/keys/bob", headers=bearer(ADMIN)).status_code == 200
        assert_error(chat(root, bearer(plaintext)), 401, "authentication_error", "invalid")


def test_metrics_can_require_a_key(fake: FakeHandle) -> None:
    keys = [key("alice", CLIENT), key("prom", SCRAPER, role="metrics")]
    config = config_with(fake.base_url, keys, metrics_requires_key=True)
    with serving(guarded_app(config, [])) as root:
        assert httpx.get(f"{root}/metrics").status_code == 401
        assert httpx.get(f"{root}/metrics", headers=bearer(CLIENT)).status_code == 403
        scraped = httpx.get(f"{root}/metrics", headers=bearer(SCRAPER))
        assert scraped.status_code == 200 and "gateway_" in scraped.text
        assert chat(root, bearer(SCRAPER)).status_code == 403


def test_config_rejects_unknown_models_and_duplicate_keys(fake: FakeHandle) -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        config_with(fake.base_url, [key("alice", CLIENT, models=["nope"])])
    with pytest.raises(ConfigError, match="unique"):
        config_with(fake.base_url, [key("alice", CLIENT), key("alice", OTHER)])
    with pytest.raises(ConfigError, match="sha256"):
        config_with(fake.base_url, [{"id": "alice", "sha256": CLIENT}])


# ---- the budget statement racing itself ------------------------------------------------------


def _race(accesses: list[Access], limit: int, attempts: int) -> int:
    """`attempts` threads per Access reserve at once against one budget; returns grants."""
    budget = Key("shared", "client", None, limit, 10_000, 3600.0)
    barrier = threading.Barrier(attempts * len(accesses))

    def one(access: Access) -> bool:
        barrier.wait()
        try:
            asyncio.run(access.admit(budget, "smol", {"max_tokens": 10}, 40))
        except Exception as e:  # RateLimited
            assert type(e).__name__ == "RateLimited"
            return False
        return True

    with ThreadPoolExecutor(attempts * len(accesses)) as pool:
        return sum(pool.map(one, [a for a in accesses for _ in range(attempts)]))


def test_two_gateways_on_one_postgres_never_overshoot(pg_admin: str) -> None:
    url = pg.fresh_database(pg_admin).replace("postgresql://", "postgresql+psycopg://")
    engines = [sa.create_engine(url, pool_size=20) for _ in range(2)]
    migrate(engines[0])  # as the record store does before the guard attaches to it
    accesses = [Access(config_from({}).access, e, clock=lambda: IN_A_WINDOW) for e in engines]
    try:
        assert _race(accesses, limit=25, attempts=20) == 25
        assert accesses[0].usage("shared", int(IN_A_WINDOW // 3600 * 3600)) == (25, 25 * 20)
    finally:
        for a in accesses:
            a.close()
        for e in engines:
            e.dispose()


def test_two_gateways_on_one_sqlite_file_never_overshoot(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    engines = [sa.create_engine(url, connect_args={"timeout": 30}) for _ in range(2)]
    migrate(engines[0])
    accesses = [Access(config_from({}).access, e, clock=lambda: IN_A_WINDOW) for e in engines]
    try:
        assert _race(accesses, limit=7, attempts=10) == 7
    finally:
        for a in accesses:
            a.close()


def test_admin_reload_applies_new_keys_from_the_config_file(
    fake: FakeHandle, tmp_path: Any
) -> None:
    path = tmp_path / "config.toml"

    def write(*keys: tuple[str, str, str]) -> None:
        lines = [
            f'[[upstreams]]\nname = "a"\nkind = "vllm"\nbase_url = "{fake.base_url}"\n'
            'model = "fake-model"\n[models.smol]\nupstreams = ["a"]\n'
        ]
        for id_, plaintext, role in keys:
            lines.append(
                f'[[access.keys]]\nid = "{id_}"\nsha256 = "{hash_key(plaintext)}"\n'
                f'role = "{role}"\n'
            )
        path.write_text("".join(lines))

    write(("ops", ADMIN, "admin"), ("alice", CLIENT, "client"))
    from gateway.config import load_config

    app = guarded_app(load_config(path), [])
    app.state.config_path = path
    with serving(app) as root:
        assert chat(root, bearer(OTHER)).status_code == 401
        write(("ops", ADMIN, "admin"), ("bob", OTHER, "client"))
        reloaded = httpx.post(f"{root}/admin/reload", headers=bearer(ADMIN))
        assert reloaded.status_code == 200, reloaded.text
        assert chat(root, bearer(OTHER)).status_code == 200
        assert chat(root, bearer(CLIENT)).status_code == 401  # alice is gone
        path.write_text("[server]\nnope = 1\n")
        broken = httpx.post(f"{root}/admin/reload", headers=bearer(ADMIN))
        assert_error(broken, 400, "invalid_request_error", "server.nope: unknown key")
        assert chat(root, bearer(OTHER)).status_code == 200  # a bad file changes nothing
