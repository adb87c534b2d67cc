"""The front doors, one package per API: OpenAI (`openai`: chat completions, completions,
embeddings, models), OpenAI Responses (`responses`) and Anthropic Messages (`messages`).

Each door is split alike: `routes` (its handlers and its rows of the edge's request table),
`protocol` (its wire models and field policy), `translation` (its request as a chat-completions
body) and `stream` (the chat answer rendered back, streamed). Shared by the doors: `chunks` (the
chat stream's events), `wire` (checking a body against its model), `policy` (the field policy's
table) and `router` (every door's routes).
"""
