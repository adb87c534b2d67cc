"""A bench target: an OpenAI-compatible base URL, the model to ask for, and its API path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible base URL (ending in ``/v1``) and the model name to send it."""

    label: str
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        """The server root, where vLLM and llama.cpp expose their tokenizer endpoints."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


def parse_target(text: str, model: str, api_key: str | None = None) -> Target:
    """``URL`` or ``LABEL=URL``; the label defaults to the URL's host and port."""
    label, sep, url = text.partition("=")
    if not sep:
        label, url = "", text
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"target {text!r} is not an http(s) URL")
    return Target(label or url.split("//", 1)[1].split("/", 1)[0], url.rstrip("/"), model, api_key)
