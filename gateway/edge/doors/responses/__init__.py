"""The OpenAI Responses door (/v1/responses): `routes`, `protocol` (wire models and field policy),
`translation` (the request as chat completions), `render` and `stream` (the answer back, whole or
streamed), `tools` (the request's tool map)."""
