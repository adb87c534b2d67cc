"""Realistic answer text for the fake upstream (behaviour ``realistic``): what a model's tokens
look like on the wire, for benchmarks and tests that must not be flattered by ``tok0 tok1``.

The passage mixes what real answers carry and a relay's fast paths may not expect: prose with
leading-space word pieces, punctuation runs, line breaks and tabs (JSON ``\\n`` and ``\\t``),
double quotes and backslashes (``\\"``, ``\\\\``), code, accented Latin, Greek, Cyrillic,
Arabic, CJK and emoji (multi-byte UTF-8, some outside the BMP). It is cut into token-like
pieces (a word with its leading space, a run of punctuation, a line break); an answer of N
tokens takes the first N pieces, cycling through the passage.
"""

from __future__ import annotations

import re
from functools import lru_cache

PASSAGE = (
    'Sure — here is the answer, with "quotes", a back\\slash and a tab\there.\n\n'
    "1. First, the café's naïve résumé: déjà vu, Grüße aus Köln, ¿qué tal?\n"
    "2. Then some code:\n\n"
    "```python\n"
    'def greet(name: str) -> str:\n\treturn f"héllo, {name}!\\n"\n'
    'path = "C:\\\\Users\\\\data\\\\file.json"\n'
    "```\n\n"
    "日本語のテキストも含まれます。中文也可以：你好，世界！"
    " Ελληνικά κείμενα, русский текст, النص العربي, हिन्दी पाठ.\n"
    "Emoji 🚀✨👩‍💻 and math: ∑ xᵢ² ≤ ∞, ½ ≈ 0.5, π ≈ 3.14159…\n"
    'JSON inside text: {"key": "value with \\"escapes\\"", "n": [1, 2, 3]}\n'
)
# CJK goes one or two characters a piece, as tokenizers cut it; words keep their leading space.
_PIECE = re.compile(
    r"[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef]{1,2}|\n|\t| ?[^\W_]+| ?[^\w\s]+| ?_+| +"
)


@lru_cache(maxsize=1)
def pieces() -> tuple[str, ...]:
    """The passage as token-like pieces; joined, they are the passage again."""
    out = tuple(_PIECE.findall(PASSAGE))
    assert "".join(out) == PASSAGE, "the piece pattern must cover the whole passage"
    return out


@lru_cache(maxsize=64)
def realistic_words(tokens: int) -> tuple[str, ...]:
    """`tokens` pieces of the passage, cycling through it."""
    all_pieces = pieces()
    return tuple(all_pieces[i % len(all_pieces)] for i in range(tokens))
