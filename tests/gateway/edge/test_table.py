"""The request table (`gateway/edge/table.py`) is the one source of the app's routes: the router
holds every row, the schema documents every documented row, the edge takes exactly the
generation rows' `POST`, and a wrong method on one of them is the router's 405, rendered by the
one error renderer with the request ids."""

from __future__ import annotations

import httpx

from gateway.edge.doors.openai.protocol import ChatRequest
from gateway.edge.route import inlined
from gateway.edge.table import TABLE
from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.doors.openai.test_routes import gateway_config
from tests.harness import serving

GENERATION = {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
}


def test_the_table_names_each_route_once() -> None:
    rows = [(method, row.path) for row in TABLE for method in row.methods]
    assert len(rows) == len(set(rows))
    assert {row.path for row in TABLE if row.generation} == GENERATION
    assert all(row.method == "POST" for row in TABLE if row.generation)


def test_the_app_serves_and_documents_the_table(fake: FakeHandle) -> None:
    with serving(gateway_config(("a", fake.base_url))) as (url, app):
        assert app.hot == frozenset(GENERATION)
        served = {
            (method, route.path)
            for route in app.router.routes
            for method in getattr(route, "methods", None) or ()
        }
        assert {(m, row.path) for row in TABLE for m in row.methods} <= served
        schema = httpx.get(url.removesuffix("/v1") + "/openapi.json", timeout=10).json()
    documented = {row.path for row in TABLE if row.schema}
    assert set(schema["paths"]) == {p.replace("{model:path}", "{model}") for p in documented}
    chat = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    body = chat["content"]["application/json"]["schema"]
    assert body["title"] == "ChatRequest" and set(body["required"]) == {"model", "messages"}
    assert "$ref" not in str(body) and set(body["properties"]) == set(
        inlined(ChatRequest)["properties"]
    )
    assert not any(p.startswith("/console") or p == "/api/hello" for p in schema["paths"])


def test_a_wrong_method_on_a_generation_path_is_a_405_with_the_ids(fake: FakeHandle) -> None:
    with serving(gateway_config(("a", fake.base_url))) as (url, _app):
        for path in sorted(GENERATION):
            r = httpx.get(url.removesuffix("/v1") + path, headers={"x-request-id": "mine"})
            assert r.status_code == 405, path
            assert r.json()["error"]["message"] == f"Method GET is not allowed on {path}"
            assert r.headers["x-request-id"] == "mine"
            assert r.headers["x-plumbline-request-id"].startswith("req-")
