"""The OpenAI door: /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/models, relayed
as they are (`routes`), validated by `protocol`, with the field policy of `fields`."""
