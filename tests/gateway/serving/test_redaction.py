"""Upstream text made fit for clients, records and logs (`gateway/serving/redaction.py`): every
configured key in any encoding, URLs, hosts, addresses and paths out; an ordinary message kept as
it was."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from urllib.parse import quote, quote_plus, unquote

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.serving.redaction import WITHHELD, Redactor, base64_cores
from tests.harness import config_from

KEY = "Zq9!hunter2-0cb7/e1d4:x"


def redact(text: str, *secrets: str, hosts: tuple[str, ...] = ()) -> str:
    return Redactor.from_values(secrets or (KEY,), hosts).text(text, limit=10_000)


def test_a_key_in_every_encoding_a_server_echoes_it_in() -> None:
    basic = base64.b64encode(f"user:{KEY}".encode()).decode()
    encoded = [
        KEY,
        quote(KEY, safe=""),  # Zq9%21hunter2-…: the stress run's leak
        quote(KEY, safe="").replace("%2F", "%2f").replace("%3A", "%3a"),
        quote_plus(KEY),
        json.dumps(KEY)[1:-1],
        "".join(f"\\u{ord(c):04x}" for c in KEY),
        base64.b64encode(KEY.encode()).decode(),
        base64.urlsafe_b64encode(KEY.encode()).decode(),
        basic,  # inside "user:KEY" at another alignment
        KEY.encode().hex(),
    ]
    for form in encoded:
        out = redact(f"upstream refused credentials {form} (code 401)")
        assert "hunter2" not in out and form not in out, (form, out)
        assert "[redacted]" in out or out == WITHHELD
        assert "refused credentials" in out or out == WITHHELD


def test_an_encoding_no_list_foresees_is_withheld_whole() -> None:
    """`-` left as is by URL-encoders, encoded here anyway: no form matches, yet the decoded
    text holds the key, so the whole text is withheld."""
    odd = "".join(f"%{ord(c):02X}" if c in "-h" else c for c in KEY)
    assert unquote(odd) == KEY
    assert redact(f"bad key {odd}") == WITHHELD
    twice = quote(quote(KEY, safe=""), safe="")
    assert "hunter2" not in redact(f"bad key {twice}")


def test_every_configured_key_not_only_the_failing_upstreams(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PL_TEST_KEY_A", "alpha-secret-1234")
    monkeypatch.setenv("PL_TEST_KEY_B", "bravo-secret-5678")
    config = config_from(
        {
            "upstreams": [
                {
                    "name": "a",
                    "kind": "openai",
                    "base_url": "https://api.provider-a.example/v1",
                    "model": "m",
                    "api_key_env": "PL_TEST_KEY_A",
                },
                {
                    "name": "b",
                    "kind": "vllm",
                    "base_url": "http://gpu-box:8000/v1",
                    "model": "m",
                    "api_key_env": "PL_TEST_KEY_B",
                    "headers": {"X-Tenant": "tenant-token-99"},
                },
            ],
            "models": {"m": {"upstreams": ["a", "b"]}},
        }
    )
    redactor = Redactor.of(config)
    out = redactor.text(
        "b said bravo-secret-5678 / tenant-token-99 via gpu-box:8000 and gpu-box; "
        "a's key alpha-secret-1234"
    )
    for leaked in ("bravo", "tenant-token", "gpu-box", "alpha-secret"):
        assert leaked not in out, out
    assert out.startswith("b said") and "a's key" in out


def test_urls_hosts_addresses_and_paths() -> None:
    text = (
        "cannot connect to secret-internal-host.corp.invalid:8497; backend "
        "http://10.20.30.40:8000/v1/chat failed at 10.20.30.41:9000, [fd00::7]:8000 and "
        "fe80::1ff:fe23:4567:890a, see https://grafana.corp/d/x?key=1 or "
        "/srv/models/qwen/config.json"
    )
    out = redact(text)
    for leaked in (
        "secret-internal-host",
        "corp.invalid",
        "8497",
        "10.20.30",
        "fd00",
        "fe80",
        "grafana",
        "/srv/models",
        "http",
    ):
        assert leaked not in out, (leaked, out)
    assert "[host]" in out and "[url]" in out and "[address]" in out and "[path]" in out


def test_configured_hosts_without_a_dot_are_named_hosts_too() -> None:
    out = redact("gpu-box refused; gpu-boxes are fine", hosts=("gpu-box",))
    assert out == "[host] refused; gpu-boxes are fine"


def test_an_ordinary_error_is_kept_as_it_was() -> None:
    """What the doors read back (a context overflow's numbers) and what a person needs."""
    for text in (
        "This model's maximum context length is 2048 tokens. However, you requested 3000 "
        "tokens (1000 in the messages, 2000 in the completion).",
        "max_tokens must be at least 1, got 0.",
        "Rate limit reached; retry at 12:30:45.",
        "Input validation error: `temperature` must be strictly positive",
        "Invalid value for 'tools.0.function.name': must match ^[a-zA-Z0-9_-]+$",
        "Invalid 'messages.1.content': string too long",
        "torch.cuda.OutOfMemoryError: CUDA out of memory",
    ):
        assert redact(text) == text


def test_control_characters_are_flattened_and_the_length_bounded() -> None:
    out = Redactor().text("line one\r\nX-Injected: yes\x00" + "a " * 400)
    assert "\n" not in out and "\r" not in out and "\x00" not in out
    assert len(out) <= 301 and out.endswith("…")


def test_base64_cores_cover_each_alignment() -> None:
    secret = b"0123456789abcdef"
    cores = base64_cores(secret)
    for prefix in (b"", b"x", b"xy"):
        encoded = base64.b64encode(prefix + secret + b"tail").decode()
        assert any(core in encoded for core in cores), prefix


SECRET_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
PROSE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
ENCODERS = {
    "raw": lambda s: s,
    "url": lambda s: quote(s, safe=""),
    "url_lower": lambda s: re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(s, safe="")),
    "form": quote_plus,
    "json": lambda s: json.dumps(s)[1:-1],
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "basic": lambda s: base64.b64encode(b"u:" + s.encode()).decode(),
    "base64url": lambda s: base64.urlsafe_b64encode(s.encode()).decode(),
    "hex": lambda s: s.encode().hex(),
}


def _decoded(text: str) -> list[str]:
    """The test's own decodings of a redacted text (independent of the redactor's)."""
    views = [text, unquote(text), unquote(unquote(text))]
    with contextlib.suppress(ValueError):
        views.append(json.loads(f'"{text}"'))
    for word in re.findall(r"[A-Za-z0-9+/_\-]{4,}={0,2}", text):
        for alphabet in (None, b"-_"):
            try:
                raw = base64.b64decode(word + "=" * (-len(word) % 4), altchars=alphabet)
            except ValueError:
                continue
            views.append(raw.decode("latin-1"))
    return views


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(SECRET_CHARS, min_size=12, max_size=40),
    encoder=st.sampled_from(sorted(ENCODERS)),
    before=PROSE,
    after=PROSE,
)
def test_no_encoded_key_can_be_read_back(key: str, encoder: str, before: str, after: str) -> None:
    out = redact(before + " " + ENCODERS[encoder](key) + " " + after, key)
    for view in _decoded(out):
        assert key not in view, (encoder, out)
