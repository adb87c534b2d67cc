"""The Anthropic Messages door (/v1/messages): `routes`, `protocol` (wire models and field
policy), `translation` (the request as chat completions, with `edits`), `render` and `stream` (the
answer back, whole or streamed), `tokens` (count_tokens), `errors` (Anthropic's error shape)."""
