"""The collapse detector (`gateway/serving/degeneration.py`): planted collapse is caught, healthy
text of every shape passes."""

import pytest

from gateway.serving.degeneration import degeneration, tokens

LOOP = "I think the answer is Paris, the capital of France. " * 8

DEGENERATE = {
    "bangs": "!" * 40,
    "short bangs": "!!!!",
    "number run": "111 222 333 444",
    "long number run": "The result is "
    + " ".join(str(d) * 3 for d in [1, 2, 3, 4, 5, 6, 7, 8, 9] * 3),
    "counting": " ".join(str(n) for n in range(12, 60)),
    "sentence loop": LOOP,
    "word loop": "the " * 80,
    "healthy start then loop": "Paris is the capital of France. " + "and and and so on " * 30,
    "digits glued": "1" * 200,
    "zeros to the cap": "ANSWER: 1" + "0" * 400,
    "digit pair loop": "so x = " + "12" * 80,
    "decimal loop": "3." + "14159265" * 20,
    "thousands groups loop": "The total is " + ", ".join(["111"] * 12),
    "punctuation soup": ". , ; : ? ! ( ) . , ;",
}

HEALTHY = {
    "paris": "The capital of France is Paris.",
    "prose": (
        "The ocean covers most of the surface of our planet and holds almost all of its water. "
        "Its currents carry heat from the tropics towards the poles, shaping the weather on "
        "every continent, while the tides follow the pull of the moon. Scientists still know "
        "more about the surface of Mars than about the deepest trenches of the Pacific, where "
        "strange animals live in complete darkness under enormous pressure."
    ),
    "code": "def double(x):\n    return x * 2\n\n\ndef triple(x):\n    return x * 3\n",
    "table": "| planet | moons |\n|--------|-------|\n| Mars | 2 |\n| Earth | 1 |\n" + "=" * 16,
    "numbered list": "1. Red\n2. Blue\n3. Yellow",
    "years": "Apollo 11 landed in 1969, and the Berlin Wall fell in 1989.",
    "number": "42",
    "phone-like": "Call 555 0100 or 555 0199.",
    "empty": "",
    # A number is not repetition, however many digits repeat in it.
    "17-digit answer": "ANSWER: 12345678901234567",
    "ten to the sixteenth": "ANSWER: 10000000000000000",
    "seventeen nines": "So the largest is 10^17 - 1.\nANSWER: 99999999999999999",
    "repunit": "ANSWER: " + "1" * 30,
    "thousands separators": "ANSWER: 10,000,000,000,000,000",
    "googol": "10^100 written out is 1" + "0" * 100,
    "100 factorial": "100! = " + str(__import__("math").factorial(100)),
    "repeating decimal, a few periods": "1/7 = 0." + "142857" * 6 + "...",
}


@pytest.mark.parametrize("name", DEGENERATE)
def test_detector_catches_planted_collapse(name: str) -> None:
    assert degeneration(DEGENERATE[name]) is not None, name


@pytest.mark.parametrize("name", HEALTHY)
def test_detector_passes_healthy_text(name: str) -> None:
    assert degeneration(HEALTHY[name]) is None, degeneration(HEALTHY[name])


def test_numbers_become_digit_patterns() -> None:
    assert tokens("111 222 123!") == ["#aaa", "#aaa", "#abc", "!"]
