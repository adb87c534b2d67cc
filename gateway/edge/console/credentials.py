"""The key a browser presents to the console: the password of HTTP Basic auth.

A browser cannot put a bearer token on a page it navigates to, but it asks for Basic
credentials when a page answers 401 with a Basic challenge, and then sends them with every
request to the same origin, the page's own `fetch` calls included. The user name is ignored;
the password is the admin or console key. Only the console's paths read it (`gateway.edge.guard`).
"""

from __future__ import annotations

import base64
import binascii

PREFIX = "/console"
ROLES = ("admin", "console")
CHALLENGE = b'Basic realm="Plumbline console", charset="UTF-8"'


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def basic_password(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The password of `Authorization: Basic …` (ASGI raw headers), None if there is none."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, encoded = value.decode("latin-1").strip().partition(" ")
        if scheme.lower() != "basic":
            continue
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, colon, password = decoded.partition(":")
        return password if colon and password else None
    return None
