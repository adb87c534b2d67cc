"""Splitting reasoning out of the answer when an upstream leaks `<think>` into `content`.

A vLLM server started without `--reasoning-parser` returns the chain of thought inside
`content`: either wrapped in `<think>…</think>`, or, with Qwen3-style templates that open the
block in the prompt, as plain text followed by a lone `</think>`. Graded as the answer, that text
is the plausible wrong number. The gateway moves it to `reasoning_content` (and `reasoning`,
vLLM's newer name) itself, streaming included, and flags the request as a reasoning leak.

`ThinkSplitter` is incremental: feed it content pieces as they arrive, it returns
(reasoning, answer) pieces, holding back only the few characters that could be the start of a
tag split across chunks.
"""

from __future__ import annotations

OPEN = "<think>"
CLOSE = "</think>"


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ThinkSplitter:
    """State machine: before (undecided) -> thinking -> answering.

    `opened_in_prompt`: the template already opened the block, so text before `</think>` is
    reasoning from the first token.
    """

    def __init__(self, opened_in_prompt: bool = False):
        self.state = "thinking" if opened_in_prompt else "before"
        self.leaked = False
        self._after_close = False
        self._held = ""

    def feed(self, piece: str) -> tuple[str, str]:
        text = self._held + piece
        self._held = ""
        reasoning: list[str] = []
        answer: list[str] = []
        while text:
            if self.state == "before":
                stripped = text.lstrip()
                if stripped.startswith(OPEN):
                    self.state = "thinking"
                    self.leaked = True
                    text = stripped[len(OPEN) :]
                    continue
                if OPEN.startswith(stripped):  # could still become "<think>"
                    self._held = text
                    break
                self.state = "answering"
                continue
            if self.state == "thinking":
                end = text.find(CLOSE)
                if end >= 0:
                    reasoning.append(text[:end])
                    self.leaked = True
                    self.state = "answering"
                    self._after_close = True
                    text = text[end + len(CLOSE) :]
                    continue
                keep = _partial_suffix(text, CLOSE)
                reasoning.append(text[: len(text) - keep])
                self._held = text[len(text) - keep :]
                break
            if self._after_close:  # drop the newlines that follow </think>, across chunks
                text = text.lstrip("\n")
                if not text:
                    break
                self._after_close = False
            # answering: a late "</think>" means everything so far was reasoning we already
            # passed on as content; we cannot take it back, but we flag the leak.
            end = text.find(CLOSE)
            if end >= 0:
                self.leaked = True
                answer.append(text[:end])
                text = text[end + len(CLOSE) :]
                continue
            keep = _partial_suffix(text, CLOSE)
            answer.append(text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            break
        return "".join(reasoning), "".join(answer)

    def flush(self) -> tuple[str, str]:
        """End of stream: whatever is held goes where the state says."""
        held, self._held = self._held, ""
        if self.state == "thinking":
            return held, ""
        return "", held


def split_text(content: str, opened_in_prompt: bool = False) -> tuple[str | None, str, bool]:
    """Whole-message form: (reasoning or None, answer, leaked)."""
    splitter = ThinkSplitter(opened_in_prompt)
    r1, a1 = splitter.feed(content)
    r2, a2 = splitter.flush()
    reasoning = r1 + r2
    # An unterminated block stays reasoning: the model never got to its answer.
    return (reasoning or None), a1 + a2, splitter.leaked or opened_in_prompt
