from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.reasoning import ThinkSplitter, split_text


def feed_in_pieces(text: str, cuts: list[int], opened: bool = False) -> tuple[str, str, bool]:
    s = ThinkSplitter(opened)
    reasoning, answer = [], []
    last = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(text))) + [len(text)]:
        r, a = s.feed(text[last:cut])
        reasoning.append(r)
        answer.append(a)
        last = cut
    r, a = s.flush()
    return "".join(reasoning) + r, "".join(answer) + a, s.leaked


def test_wrapped_think_block() -> None:
    assert split_text("<think>plan it</think>\n42") == ("plan it", "42", True)


def test_close_only_when_template_opened_the_block() -> None:
    assert split_text("plan it</think>42", opened_in_prompt=True) == ("plan it", "42", True)


def test_unterminated_block_is_all_reasoning() -> None:
    reasoning, answer, leaked = split_text("<think>still thinking", False)
    assert reasoning == "still thinking" and answer == "" and leaked


def test_plain_answer_is_untouched() -> None:
    assert split_text("The answer is 42.") == (None, "The answer is 42.", False)


def test_a_late_close_tag_is_flagged_as_leak() -> None:
    reasoning, answer, leaked = split_text("thinking aloud</think>42")
    assert leaked and "think>" not in answer


@given(
    st.text(alphabet="ab <>/thinkx\n", max_size=30),
    st.text(alphabet="ab 42\n", max_size=20),
    st.lists(st.integers(0, 80), max_size=10),
)
def test_any_chunking_gives_the_same_split(thought: str, answer: str, cuts: list[int]) -> None:
    thought = thought.replace("</think>", "")
    text = f"<think>{thought}</think>{answer}"
    whole = feed_in_pieces(text, [])
    assert feed_in_pieces(text, cuts) == whole
    assert whole[0] == thought
