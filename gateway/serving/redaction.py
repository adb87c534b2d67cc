"""Redaction: upstream text made fit for clients, records and logs.

What an upstream says when it fails (its error body, a connection error, an error event inside a
stream) reaches the client's error body, the stored contents and the log only through
`Redactor.text`. It takes out, in this order:

    what                                        becomes
    every configured secret (each upstream's    [redacted]
    key and header values, the store URL's
    password), as is and in every encoding a
    server may echo it in: URL-encoded (upper
    and lower case escapes, `+` for spaces),
    JSON-escaped, base64 (standard and URL-safe,
    at each of the three alignments it can have
    inside a longer encoded string), hex
    URLs (any scheme)                           [url]
    each configured upstream's host, and any    [host]
    dotted host name (`gpu-7.internal.corp:9000`;
    not a parameter's path with an index, nor a
    Python name ending in a class: `_host`)
    IPv4 and IPv6 addresses, with their port    [address]
    absolute paths of two or more segments      [path]
    anything shaped like a credential           [redacted]
    (`api_key=…`, `Bearer …`, `sk-…`, any long
    opaque token)

then flattens control characters (log and header injection) and bounds the length. Encodings
no list foresees are caught after the fact: if a secret can still be read from the result once
it is URL-decoded (repeatedly), JSON-unescaped or HTML-unescaped, the whole text is withheld.

Upstreams are named by their configured name by the callers; nothing here names one.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

import orjson

from gateway.config import Config

WITHHELD = "[the upstream's error text was withheld: it held a credential]"
LIMIT = 300
_MIN_SECRET = 4  # shorter values are not looked for (they would match ordinary words)
_MIN_CORE = 8  # the shortest base64 core of a secret that is looked for

_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]{1,15}://[^\s\"'<>`]+")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])")
_IPV6_BRACKETED = re.compile(r"\[[0-9A-Fa-f:.%\w]*:[0-9A-Fa-f:.%\w]*\](?::\d{1,5})?")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_HOST = re.compile(
    r"(?i)(?<![\w.\-])(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}"
    r"(?::\d{1,5})?(?![\w\-])"
)
_PATH = re.compile(r"(?<![\w.:/\]])/(?:[\w.\-~]+/)+[\w.\-~]*")
_CREDENTIAL = re.compile(
    r"(?i)\b(?:authorization|x-api-key|api[-_ ]?key|token|secret|password)\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic)\s+)?[^\s\"',;]+"
    r"|(?i:\b(?:bearer|basic)\s+)[^\s\"',;]+"  # "Bearer xyz"
    r"|\b(?:sk|pk|rk|pl)-[A-Za-z0-9_*.\-]{6,}"  # vendor-prefixed keys, masked ones too
    r"|[A-Za-z0-9_\-+/=]{32,}"  # any long opaque token (keys, JWTs, hashes)
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_JSON_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\(.)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _ipv6(match: re.Match[str]) -> str:
    """An IPv6-looking run is an address when it has `::` or a hex letter or five colons (a
    clock's `12:30:45` is none of these)."""
    found = match.group(0)
    if "::" in found or found.count(":") >= 5 or re.search(r"[A-Fa-f]", found):
        return "[address]"
    return found


def _host(match: re.Match[str]) -> str:
    """A dotted name is a host unless it reads as something else: a parameter's path with an
    index (`tools.0.function.name`) or a Python name ending in a class (`torch.cuda.OutOfMemory
    Error`). With a port it is a host whatever it reads as."""
    found = match.group(0)
    name, port, _ = found.partition(":")
    if not port:
        labels = name.split(".")
        last = labels[-1]
        if any(label.isdigit() for label in labels) or last not in (last.lower(), last.upper()):
            return found
    return "[host]"


def base64_cores(secret: bytes) -> set[str]:
    """The base64 text that encodes `secret` wherever it sits in a longer encoded string: the
    characters fully determined by its bytes, at each of the three alignments, in the standard
    and the URL-safe alphabets."""
    cores: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret).decode().rstrip("=")
        start = -(-8 * shift // 6)  # the first character holding none of the padding's bits
        end = 8 * (shift + len(secret)) // 6  # the last whole one
        core = encoded[start:end]
        if len(core) >= _MIN_CORE:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def encodings(secret: str) -> set[str]:
    """`secret` as is and as servers echo it: URL-encoded, JSON-escaped, base64, hex."""
    raw = secret.encode()
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in list(forms)}
    forms.add(orjson.dumps(secret).decode()[1:-1])
    forms.add("".join(f"\\u{ord(c):04x}" for c in secret))
    forms |= base64_cores(raw)
    forms |= {raw.hex(), raw.hex().upper()}
    return {f for f in forms if len(f) >= _MIN_SECRET}


def _json_unescaped(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _SIMPLE_ESCAPES.get(match.group(2), match.group(2))

    return _JSON_ESCAPE.sub(one, text)


def _views(text: str) -> Iterable[str]:
    """`text` decoded every way a secret could still hide in it."""
    seen = text
    yield text
    for _ in range(3):  # URL-encoded once, twice, three times
        seen = unquote(seen)
        yield seen
    yield unquote_plus(text)
    yield _json_unescaped(text)
    yield html.unescape(text)
    for word in re.findall(r"[A-Za-z0-9+/_\-]{8,}={0,2}", text):
        try:
            yield base64.b64decode(word + "=" * (-len(word) % 4), altchars=b"-_").decode(
                "utf-8", "replace"
            )
        except (binascii.Error, ValueError):
            continue


@dataclass(frozen=True)
class Redactor:
    """The secrets and hosts of one config, and the redaction of text against them."""

    secrets: tuple[str, ...] = ()
    forms: tuple[str, ...] = ()  # every encoding of every secret, longest first
    hosts: re.Pattern[str] | None = None  # configured host names and authorities

    @classmethod
    def of(cls, config: Config | None = None) -> Redactor:
        """The redactor of `config`'s secrets (read now: keys come from the environment) and
        upstream hosts."""
        if config is None:
            return cls()
        secrets: set[str] = set()
        hosts: set[str] = set()
        for upstream in config.upstreams:
            secrets.update(v for v in (upstream.api_key(), *upstream.headers.values()) if v)
            parts = urlsplit(upstream.base_url)
            hosts.update(h for h in (parts.hostname, parts.netloc) if h)
        store = urlsplit(config.store.url)
        if store.password:
            secrets.add(store.password)
        if store.hostname:
            hosts.add(store.hostname)
        return cls.from_values(secrets, hosts)

    @classmethod
    def from_values(cls, secrets: Iterable[str], hosts: Iterable[str] = ()) -> Redactor:
        kept = tuple(sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True))
        forms = {f for s in kept for f in encodings(s)}
        named = sorted({h for h in hosts if h}, key=len, reverse=True)
        pattern = (
            re.compile(
                r"(?i)(?<![\w.\-])(?:"
                + "|".join(map(re.escape, named))
                + r")(?::\d{1,5})?(?![\w\-])"
            )
            if named
            else None
        )
        return cls(secrets=kept, forms=tuple(sorted(forms, key=len, reverse=True)), hosts=pattern)

    def text(self, text: str, limit: int = LIMIT) -> str:
        """`text` with nothing internal left in it (see the module's docstring), bounded."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, "[redacted]")
        text = _URL.sub("[url]", text)
        if self.hosts is not None:
            text = self.hosts.sub("[host]", text)
        text = _IPV4.sub("[address]", text)
        text = _IPV6_BRACKETED.sub("[address]", text)
        text = _IPV6.sub(_ipv6, text)
        text = _HOST.sub(_host, text)
        text = _PATH.sub("[path]", text)
        text = _CREDENTIAL.sub("[redacted]", text)
        if self.leaks(text):
            return WITHHELD
        text = _CONTROL.sub(" ", text).strip()
        return text[:limit] + ("…" if len(text) > limit else "")

    def leaks(self, text: str) -> bool:
        """Whether a configured secret can be read from `text` decoded any way `_views` does."""
        if not self.secrets:
            return False
        for view in _views(text):
            if any(secret in view for secret in self.secrets):
                return True
            if any(form in view for form in self.forms):
                return True
        return False


def mask(text: str, secrets: Iterable[str] = (), limit: int = LIMIT) -> str:
    """`text` as it may be shown anywhere (a failed eval round's message, say): the redaction
    of `secrets` in every encoding, of URLs, hosts, addresses, paths and anything shaped like a
    credential, bounded to `limit` characters."""
    return Redactor.from_values(secrets).text(text, limit)
