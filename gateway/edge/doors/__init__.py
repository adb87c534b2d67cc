"""Front doors that speak other APIs than chat completions: OpenAI Responses, Anthropic Messages.

Each door validates its own wire format, translates the request into a chat-completions body and
renders the chat answer back; `router` serves both (`app.include_router(doors.router)`).
"""

from gateway.edge.doors.router import router

__all__ = ["router"]
