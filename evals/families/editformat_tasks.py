"""The editformat family's tasks: ten small modules, each with its tests and the bugs that can be
planted in it (one per item). `evals.families.editformat` builds the items and scores the edits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Task:
    module: str
    source: str
    tests: str
    bugs: tuple[tuple[str, str], ...]  # (text in source, replacement): each plants one bug


TASKS: tuple[Task, ...] = (
    Task(
        "clamp",
        '''def clamp(value, low, high):
    """Limit value to the closed range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
''',
        """from clamp import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_edges():
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(0, 0, 10) == 0
""",
        (
            ("value < low", "value > low"),
            ("return high", "return low"),
            ("return value", "return low"),
        ),
    ),
    Task(
        "vowels",
        '''def count_vowels(text):
    """Count the vowels a, e, i, o, u in text, ignoring case."""
    return sum(1 for ch in text.lower() if ch in "aeiou")
''',
        """from vowels import count_vowels


def test_count():
    assert count_vowels("Education") == 5
    assert count_vowels("rhythm") == 0
    assert count_vowels("AUDIO") == 4
""",
        (('"aeiou"', '"aeio"'), ("text.lower()", "text"), ("if ch in", "if ch not in")),
    ),
    Task(
        "fizzbuzz",
        '''def fizzbuzz(n):
    """The FizzBuzz words for 1..n inclusive."""
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out
''',
        """from fizzbuzz import fizzbuzz


def test_fizzbuzz():
    got = fizzbuzz(15)
    assert len(got) == 15
    assert got[:5] == ["1", "2", "Fizz", "4", "Buzz"]
    assert got[9] == "Buzz"
    assert got[14] == "FizzBuzz"
""",
        (
            ("range(1, n + 1)", "range(1, n)"),
            ("i % 15 == 0", "i % 10 == 0"),
            ('"Buzz")', '"Fizz")'),
        ),
    ),
    Task(
        "search",
        '''def binary_search(items, target):
    """Index of target in the sorted list items, or -1 when it is absent."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
''',
        """from search import binary_search


def test_found():
    items = [1, 3, 5, 7, 9, 11]
    for i, x in enumerate(items):
        assert binary_search(items, x) == i


def test_absent():
    assert binary_search([1, 3, 5], 4) == -1
    assert binary_search([], 1) == -1
""",
        (
            ("while lo <= hi", "while lo < hi"),
            ("len(items) - 1", "len(items) - 2"),
            ("return -1", "return 0"),
        ),
    ),
    Task(
        "leap",
        '''def is_leap_year(year):
    """Whether year is a leap year in the Gregorian calendar."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
''',
        """from leap import is_leap_year


def test_leap():
    assert is_leap_year(2024)
    assert is_leap_year(2000)
    assert not is_leap_year(1900)
    assert not is_leap_year(2200)
    assert not is_leap_year(2023)
""",
        (
            ("year % 400", "year % 200"),
            ("year % 100 != 0", "year % 100 == 0"),
            ("== 0 and", "== 0 or"),
        ),
    ),
    Task(
        "median",
        '''def median(values):
    """The median of a non-empty list of numbers."""
    ordered = sorted(values)
    n = len(ordered)
    if n % 2 == 1:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2
''',
        """from median import median


def test_odd():
    assert median([3, 1, 2]) == 2


def test_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([1, 2]) == 1.5
""",
        (("sorted(values)", "list(values)"), (") / 2", ") // 2"), ("n % 2 == 1", "n % 2 == 0")),
    ),
    Task(
        "chunks",
        '''def chunk(items, size):
    """Split items into consecutive lists of length size (the last may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]
''',
        """from chunks import chunk


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([1, 2, 3], 3) == [[1, 2, 3]]
    assert chunk([], 4) == []
""",
        (
            ("i + size]", "i + size - 1]"),
            ("range(0, len(items), size)", "range(0, len(items) - 1, size)"),
            ("range(0,", "range(1,"),
        ),
    ),
    Task(
        "roman",
        '''NUMERALS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]


def to_roman(number):
    """The Roman numeral for 1 <= number <= 3999."""
    out = []
    for value, letters in NUMERALS:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)
''',
        """from roman import to_roman


def test_roman():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3888) == "MMMDCCCLXXXVIII"
""",
        (
            ('(900, "CM")', '(900, "DM")'),
            ("number >= value", "number > value"),
            ('(4, "IV")', '(4, "IIII")'),
        ),
    ),
    Task(
        "caesar",
        '''def caesar(text, shift):
    """Shift letters by shift places, keeping case; other characters are unchanged."""
    out = []
    for ch in text:
        if ch.isalpha():
            base = ord("A") if ch.isupper() else ord("a")
            out.append(chr((ord(ch) - base + shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)
''',
        """from caesar import caesar


def test_caesar():
    assert caesar("abc", 1) == "bcd"
    assert caesar("Hello, World!", 3) == "Khoor, Zruog!"
    assert caesar("xyz", 3) == "abc"
""",
        (("% 26", "% 25"), ('ord("A") if', 'ord("a") if'), ("out.append(ch)", "pass")),
    ),
    Task(
        "flatten",
        '''def flatten(nested):
    """All non-list elements of arbitrarily nested lists, in order."""
    result = []
    for x in nested:
        if isinstance(x, list):
            result.extend(flatten(x))
        else:
            result.append(x)
    return result
''',
        """from flatten import flatten


def test_flatten():
    assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]
    assert flatten([[], [[]], 6]) == [6]
    assert flatten(["a", ["b"]]) == ["a", "b"]
""",
        (
            ("isinstance(x, list)", "isinstance(x, tuple)"),
            ("result.extend(flatten(x))", "result.append(flatten(x))"),
            ("result.append(x)", "result.insert(0, x)"),
        ),
    ),
)
