import random

import pytest

from evals import families
from evals.families import math as family
from evals.families import math_templates
from evals.item import Item, Reply, items_digest
from tests.evals.families import math_probes


def _int_item(answer: int = 35) -> Item:
    return Item("t", "math", ({"role": "user", "content": "q"},), answer, "math_integer")


def _sym_item(answer: str = "3/2 + sqrt(5)/2") -> Item:
    return Item("t", "math", ({"role": "user", "content": "q"},), answer, "math_symbolic")


def test_build_is_deterministic_in_the_seed() -> None:
    a, b, c = family.build(0, 33), family.build(0, 33), family.build(1, 33)
    assert items_digest(a) == items_digest(b)
    assert items_digest(a) != items_digest(c)
    assert len(a) == 33 and len({i.id for i in a}) == 33


def test_default_suite_covers_every_template() -> None:
    items = family.build(0)
    assert len(items) == family.DEFAULT_N
    assert {i.meta["template"] for i in items} == set(family.TEMPLATES)
    for item in items:
        assert "ANSWER:" in item.messages[0]["content"]
        if item.scorer == "math_integer":
            assert isinstance(item.answer, int)


def test_items_whose_solvers_disagree_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([("q1", 1, 2), ("q2", 7, 7)])
    monkeypatch.setattr(family, "TEMPLATES", {"flaky": (lambda rng: next(answers), "math_integer")})
    [item] = family.build(0, 1)
    assert item.answer == 7 and "q2" in item.messages[0]["content"]


def test_answers_check_out_by_a_third_method() -> None:
    # The power-tower answer, recomputed here from the question text.
    rng = random.Random(5)
    question, answer, _ = math_templates.power_tower(rng)
    nums = [
        int(t)
        for t in question.replace("^", " ")
        .replace("(", " ")
        .replace(")", " ")
        .replace(".", " ")
        .split()
        if t.isdigit()
    ]
    a, b, c, m = nums
    assert answer == pow(a, b**c, m)


@pytest.mark.parametrize(
    ("content", "outcome"),
    [
        ("work...\nANSWER: 35", "correct"),
        ("ANSWER: 035", "correct"),
        ("**ANSWER: 35**", "correct"),
        ("**ANSWER:** 35.", "correct"),
        ("ANSWER: \\boxed{35}", "correct"),
        ("ANSWER: $35$", "correct"),
        ("ANSWER: x = 35", "correct"),
        ("ANSWER: 35.0", "correct"),
        ("ANSWER: 3 or 5", "wrong"),
        ("ANSWER: 3,5", "wrong"),
        ("ANSWER: 3, 5", "wrong"),
        ("ANSWER: 3 5", "wrong"),
        ("ANSWER: 3.5e1", "wrong"),
        ("ANSWER: 35 or 36", "wrong"),
        ("ANSWER: 36 or 35", "wrong"),
        ("ANSWER: thirty-five", "unparsed"),
        ("ANSWER: __import__('os').getcwd()", "unparsed"),
        ("ANSWER: 9^9^9^9", "unparsed"),
        ("ANSWER: -35", "wrong"),
        ("ANSWER: 36", "wrong"),
        ("The answer is 35.", "unparsed"),
        ("ANSWER: 35\nHope this helps!", "unparsed"),
        ("<think>so ANSWER: 35</think>\nANSWER: 34", "wrong"),
        ("<think>so the answer is 35\nANSWER: 35", "unparsed"),
        ("reasoning, ANSWER: 35</think>\nI believe it is 36", "unparsed"),
        ("", "unparsed"),
    ],
)
def test_integer_near_misses(content: str, outcome: str) -> None:
    assert family.score_integer(_int_item(), Reply(content)).outcome == outcome


def test_answer_only_in_the_reasoning_field_is_not_an_answer() -> None:
    reply = Reply(content="I computed it above.", reasoning="...\nANSWER: 35")
    assert family.score_integer(_int_item(), reply).outcome == "unparsed"
    assert family.score_integer(_int_item(), Reply(None, reasoning="ANSWER: 35")).outcome == (
        "unparsed"
    )


def test_unicode_minus_is_a_minus() -> None:
    assert family.score_integer(_int_item(-35), Reply("ANSWER: \u221235")).correct


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ("(3+sqrt(5))/2", "correct"),
        ("3/2 + sqrt(5)/2", "correct"),
        ("(3 + \u221a5)/2", "correct"),
        ("\\frac{3+\\sqrt{5}}{2}", "correct"),
        ("$\\frac{3+\\sqrt{5}}{2}$", "correct"),
        ("2.618", "wrong"),
        ("2.6180339887498949", "wrong"),
        ("(3 + 5**0.5)/2", "wrong"),
        ("(3-sqrt(5))/2", "wrong"),
        ("(3 + sqrt(5))/2", "correct"),
        ("\\boxed{\\dfrac{3+\\sqrt5}{2}}", "correct"),
        ("1.5 + \\sqrt{5}/2", "wrong"),
        ("3 or 5", "wrong"),
        ("x + 1", "unparsed"),
        ("__import__('os').getcwd()", "unparsed"),
        ("9^9^9^9", "unparsed"),
        ("x" * 300, "unparsed"),
    ],
)
def test_symbolic_near_misses(value: str, outcome: str) -> None:
    verdict = family.score_symbolic(_sym_item(), Reply(f"so\nANSWER: {value}"))
    assert verdict.outcome == outcome, verdict


def test_symbolic_items_are_scored_correct_with_their_own_answer() -> None:
    for item in family.build(3, 22):
        if item.scorer == "math_symbolic":
            assert family.score_symbolic(item, Reply(f"ANSWER: {item.answer}")).correct


def test_probe_set_agrees_with_math_verify() -> None:
    """Constructed answers (correct in many forms, near misses, traps), each with math-verify's
    own verdict or, where a probe names one, the rule that departs from it on purpose."""
    agree, total, misses = math_probes.agreement(families.score)
    assert total >= 300
    assert agree / total >= 0.99, [
        (p.gold, p.content.splitlines()[-1], got) for p, got, _ in misses
    ]
    pure = [p for p in math_probes.probes() if p.rule is None]
    assert math_probes.agreement(families.score, pure)[0] == len(pure)


def test_probe_set_holds_each_kind_both_ways() -> None:
    probes = math_probes.probes()
    for kind in ("correct form", "near miss", "trap"):
        verdicts = {p.reference() for p in probes if p.kind == kind}
        assert verdicts == ({True} if kind == "correct form" else {False}), kind


@pytest.mark.parametrize(
    ("gold", "scorer", "value", "outcome"),
    [
        ([3, 5], "math_integer", "5, 3", "correct"),
        ([3, 5], "math_integer", "\\{3, 5\\}", "correct"),
        ([3, 5], "math_integer", "3", "wrong"),
        ([3, 5], "math_integer", "3, 5, 7", "wrong"),
        ([3, 5], "math_integer", "35", "wrong"),
        ("3, 5", "math_symbolic", "3 and 5", "correct"),
        ("3, 5", "math_symbolic", "3", "wrong"),
        (["1+sqrt(2)", "1-sqrt(2)"], "math_symbolic", "1 \\pm \\sqrt{2}", "correct"),
        ([1331, 1728], "math_integer", "1728", "wrong"),
    ],
)
def test_multi_answer_golds_are_sets(gold: object, scorer: str, value: str, outcome: str) -> None:
    item = Item("t", "math", ({"role": "user", "content": "q"},), gold, scorer)
    verdict = families.score(item, Reply(f"so\nANSWER: {value}"))
    assert verdict.outcome == outcome, verdict


def test_a_long_integer_is_an_answer_not_a_loop() -> None:
    for n in (12345678901234567, 10**16, 10**17 - 1):
        assert families.score(_int_item(n), Reply(f"so\nANSWER: {n}")).correct


def test_departures_from_math_verify_are_named_in_the_verdict() -> None:
    decimal = family.score_symbolic(_sym_item(), Reply("ANSWER: 1.5 + sqrt(5)/2"))
    assert decimal.parts == {"math_verify": True, "spelling": True, "exact_form": False}
    minus = family.score_integer(_int_item(-35), Reply("ANSWER: \u221235"))
    assert minus.correct and minus.parts == {"math_verify": True, "spelling": True}
    plain = family.score_integer(_int_item(), Reply("ANSWER: \\boxed{35}"))
    assert plain.parts == {"math_verify": True}
    exact = family.score_symbolic(_sym_item(), Reply("ANSWER: \\frac{3+\\sqrt{5}}{2}"))
    assert exact.parts == {"math_verify": True, "exact_form": True}


@pytest.fixture(scope="module")
def gym_items() -> list[Item]:
    return family.build(0, 6, reasoning_gym=4)[2:]


def test_reasoning_gym_slice_is_seeded_and_self_consistent(gym_items: list[Item]) -> None:
    assert [i.answer["dataset"] for i in gym_items] == list(family.REASONING_GYM)
    for item in gym_items:
        gold = item.answer["entry"]["answer"]
        assert family.score_reasoning_gym(item, Reply(f"so\nANSWER: {gold}")).correct


def test_reasoning_gym_partial_credit_and_reasoning_are_not_answers(gym_items: list[Item]) -> None:
    countdown = next(i for i in gym_items if i.answer["dataset"] == "countdown")
    numbers = countdown.answer["entry"]["metadata"]["numbers"]
    wrong = " + ".join(str(x) for x in numbers)  # uses every number, misses the target
    assert family.score_reasoning_gym(countdown, Reply(f"ANSWER: {wrong}")).outcome == "wrong"
    gold = countdown.answer["entry"]["answer"]
    assert family.score_reasoning_gym(countdown, Reply(f"<think>ANSWER: {gold}")).outcome == (
        "unparsed"
    )
