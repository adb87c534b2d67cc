"""Front doors that speak other APIs than chat completions: OpenAI Responses, Anthropic Messages.

Each door validates its own wire format, translates the request into a chat-completions body and
renders the chat answer back; `router` serves both (`app.include_router(doors.router)`).

`router` is imported when first asked for: the relay imports `doors.policy`, and the router
imports the API module that imports the relay, so importing it with the package was a cycle.
"""

from typing import Any

__all__ = ["router"]


def __getattr__(name: str) -> Any:
    if name == "router":
        from gateway.doors.router import router

        return router
    raise AttributeError(f"module 'gateway.doors' has no attribute {name!r}")
