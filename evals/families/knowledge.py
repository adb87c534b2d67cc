"""Knowledge: ten-option multiple choice and short-answer factuality from offline tables.

What it measures: recall of stable, checkable facts — capitals, element numbers and symbols,
ISO 4217 currency codes, authors, dates. Tail facts like these move first under quantisation,
so the family is for *relative* comparisons (the node against the API), not an absolute
knowledge score; it does not replace MMLU-Pro (load that as a user JSONL dataset).

Where the items come from: the tables below, written for this module (every fact is stable
and uncontroversial). Each item asks one attribute of one row. Multiple-choice items offer the
gold value plus nine distractors drawn from the *same attribute* of other rows, shuffled with
the item's seed; short-answer items ask for the value itself. Nothing is downloaded.

Answer format: the last non-empty line of the answer (after any reasoning) must be
`ANSWER: <value>`; markdown emphasis around it is tolerated. Nothing else is parsed: no
letter found in the prose, no "last capital letter", no guessing — an answer that cannot be
extracted is `unparsed` (not correct). An unterminated `<think>` is unanswered; repetition
collapse is `degenerate`.

Scorers:
    knowledge_mcq    the value is one letter A-J, optionally in parentheses or followed by
                     ")" / "." and the option's own text; "A or B", "K", "AB" are unparsed.
    knowledge_short  the value's normalised tokens (case-folded, accents and punctuation
                     removed, a leading "the" dropped) must equal one gold alias's tokens
                     exactly: a superset ("Canberra, not Sydney") is wrong, and "3 or 5" is
                     not 35.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass

from evals.item import Item, Outcome, Reply, Verdict
from gateway.serving.degeneration import reply_degeneration

NAME = "knowledge"
DEFAULT_N = 60
LETTERS = "ABCDEFGHIJ"

MCQ_PROMPT = """Answer the following multiple-choice question. You may reason first. Then give \
your final answer as the last line, exactly in the form

ANSWER: <letter>

where <letter> is one of A to J.

Question: {question}

{options}"""

SHORT_PROMPT = """Answer the following question. You may reason first. Then give your final \
answer as the last line, exactly in the form

ANSWER: <answer>

with only the answer itself on that line (no explanation).

Question: {question}"""

ANSWER_LINE = re.compile(r"^[*_`\s]*ANSWER[*_`\s]*:[*_`\s]*(?P<value>.*?)[*_`\s]*$")
_TOKEN = re.compile(r"[-\u2212]?\d+(?:\.\d+)?|[^\W\d_]+")  # signed numbers stay one token
LETTER_VALUE = re.compile(r"^[(\[]?(?P<letter>[A-Ja-j])[)\].]?(?:\s+(?P<text>.+?))?\.?$")


@dataclass(frozen=True, slots=True)
class Table:
    """Rows of (subject, value, aliases...) and how to ask about them."""

    name: str
    question: str  # formatted with {subject}
    rows: str  # one row per line: subject | value | alias | alias ...
    short: bool  # whether the value is asked as a short answer too


TABLES: tuple[Table, ...] = (
    Table(
        "capital",
        "What is the capital city of {subject}?",
        """France | Paris
        Germany | Berlin
        Portugal | Lisbon
        Canada | Ottawa
        Australia | Canberra
        Brazil | Brasília | Brasilia
        Kenya | Nairobi
        Turkey | Ankara
        Norway | Oslo
        Finland | Helsinki
        Hungary | Budapest
        Peru | Lima
        Vietnam | Hanoi
        New Zealand | Wellington
        Morocco | Rabat
        Nigeria | Abuja
        Switzerland | Bern | Berne
        Mongolia | Ulaanbaatar | Ulan Bator
        Kazakhstan | Astana
        Bhutan | Thimphu
        Tanzania | Dodoma
        Myanmar | Naypyidaw | Nay Pyi Taw""",
        short=True,
    ),
    Table(
        "atomic_number",
        "What is the atomic number of {subject}?",
        """lithium | 3
        nitrogen | 7
        sodium | 11
        phosphorus | 15
        calcium | 20
        titanium | 22
        chromium | 24
        manganese | 25
        cobalt | 27
        nickel | 28
        selenium | 34
        krypton | 36
        strontium | 38
        molybdenum | 42
        silver | 47
        tin | 50
        antimony | 51
        xenon | 54
        barium | 56
        tungsten | 74
        platinum | 78
        mercury | 80
        bismuth | 83
        uranium | 92""",
        short=True,
    ),
    Table(
        "symbol",
        "What is the chemical symbol of the element {subject}?",
        """sodium | Na
        potassium | K
        iron | Fe
        copper | Cu
        silver | Ag
        tin | Sn
        antimony | Sb
        tungsten | W
        gold | Au
        mercury | Hg
        lead | Pb
        manganese | Mn
        strontium | Sr
        bismuth | Bi""",
        short=True,
    ),
    Table(
        "currency",
        "What is the ISO 4217 currency code of the {subject}?",
        """Swiss franc | CHF
        Swedish krona | SEK
        Norwegian krone | NOK
        Danish krone | DKK
        Polish zloty | PLN
        Czech koruna | CZK
        Hungarian forint | HUF
        South African rand | ZAR
        Brazilian real | BRL
        South Korean won | KRW
        Israeli new shekel | ILS
        Thai baht | THB
        Bhutanese ngultrum | BTN
        Icelandic krona | ISK
        Indonesian rupiah | IDR
        Nigerian naira | NGN
        Kenyan shilling | KES
        Ukrainian hryvnia | UAH""",
        short=True,
    ),
    Table(
        "year",
        "In which year did the following happen: {subject}?",
        """the Battle of Hastings | 1066
        the sealing of Magna Carta | 1215
        Columbus's first landfall in the Americas | 1492
        the posting of Luther's Ninety-five Theses | 1517
        the Great Fire of London | 1666
        the adoption of the United States Declaration of Independence | 1776
        the storming of the Bastille | 1789
        the Battle of Waterloo | 1815
        the Wright brothers' first powered flight | 1903
        the sinking of the Titanic | 1912
        the signing of the Treaty of Versailles | 1919
        the launch of Sputnik 1 | 1957
        the Apollo 11 Moon landing | 1969
        the Chernobyl nuclear disaster | 1986
        the fall of the Berlin Wall | 1989
        the dissolution of the Soviet Union | 1991""",
        short=True,
    ),
    Table(
        "author",
        "Who wrote the novel '{subject}'?",
        """Pride and Prejudice | Jane Austen
        Moby-Dick | Herman Melville
        War and Peace | Leo Tolstoy
        One Hundred Years of Solitude | Gabriel García Márquez
        Nineteen Eighty-Four | George Orwell
        The Trial | Franz Kafka
        Crime and Punishment | Fyodor Dostoevsky
        Frankenstein | Mary Shelley
        The Great Gatsby | F. Scott Fitzgerald
        Beloved | Toni Morrison
        The Name of the Rose | Umberto Eco
        Things Fall Apart | Chinua Achebe
        Madame Bovary | Gustave Flaubert
        Middlemarch | George Eliot
        Dracula | Bram Stoker""",
        short=False,
    ),
)


def _rows(table: Table) -> list[tuple[str, str, tuple[str, ...]]]:
    out = []
    for line in table.rows.splitlines():
        subject, value, *aliases = (cell.strip() for cell in line.split("|"))
        out.append((subject, value, (value, *aliases)))
    return out


def _mcq(table: Table, row: int, rng: random.Random) -> tuple[str, dict[str, object]]:
    rows = _rows(table)
    subject, value, _ = rows[row]
    pool = sorted({v for _, v, _ in rows} - {value})
    options = [value, *rng.sample(pool, len(LETTERS) - 1)]
    rng.shuffle(options)
    letter = LETTERS[options.index(value)]
    listing = "\n".join(f"{LETTERS[i]}) {opt}" for i, opt in enumerate(options))
    content = MCQ_PROMPT.format(question=table.question.format(subject=subject), options=listing)
    return content, {"letter": letter, "options": options}


def build(seed: int = 0, n: int = DEFAULT_N, **_: object) -> list[Item]:
    """`n` items alternating multiple choice and short answer over the tables, seeded."""
    rng = random.Random(f"knowledge:{seed}")
    mcq_slots = [(t, i) for t in TABLES for i in range(len(_rows(t)))]
    short_slots = [(t, i) for t in TABLES if t.short for i in range(len(_rows(t)))]
    rng.shuffle(mcq_slots)
    rng.shuffle(short_slots)
    items: list[Item] = []
    for k in range(n):
        use_mcq = k % 2 == 0 or not short_slots
        slots = mcq_slots if use_mcq else short_slots
        table, row = slots[(k // 2) % len(slots)]
        subject, _value, aliases = _rows(table)[row]
        if use_mcq:
            content, answer = _mcq(table, row, rng)
            scorer = "knowledge_mcq"
        else:
            content = SHORT_PROMPT.format(question=table.question.format(subject=subject))
            answer, scorer = {"aliases": list(aliases)}, "knowledge_short"
        items.append(
            Item(
                id=f"knowledge-{k:03d}-{table.name}-{'mcq' if use_mcq else 'short'}",
                family=NAME,
                messages=({"role": "user", "content": content},),
                answer=answer,
                scorer=scorer,
                meta={"table": table.name, "subject": subject, "seed": seed},
            )
        )
    return items


# ----------------------------------------------------------------------------- scoring


def final_value(reply: Reply) -> str | None:
    """The value of an `ANSWER:` last line of the answer, or None."""
    return reply.final_value(ANSWER_LINE)


def _precheck(reply: Reply) -> Verdict | str:
    found = reply_degeneration(reply.content, reply.reasoning)
    if found:
        return Verdict("degenerate", f"{found.rule}: {found.detail}")
    value = final_value(reply)
    if value is None:
        return Verdict("unparsed", "no final ANSWER line")
    return value


def normalise(text: str) -> tuple[str, ...]:
    """Case-folded word and number tokens, accents and punctuation removed (a number keeps its
    sign and decimals: "-35" and "35.0" are not "35"), a leading "the" dropped."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    toks = tuple(t.replace("\u2212", "-") for t in _TOKEN.findall(plain))
    return toks[1:] if toks[:1] == ("the",) else toks


def score_mcq(item: Item, reply: Reply) -> Verdict:
    checked = _precheck(reply)
    if isinstance(checked, Verdict):
        return checked
    match = LETTER_VALUE.match(checked.strip())
    if match is None:
        return Verdict("unparsed", f"not one letter A-J: {checked!r}", checked)
    letter = match["letter"].upper()
    options: list[str] = item.answer["options"]
    if match["text"] and normalise(match["text"]) != normalise(options[LETTERS.index(letter)]):
        return Verdict("unparsed", f"letter {letter} with another option's text", checked)
    outcome: Outcome = "correct" if letter == item.answer["letter"] else "wrong"
    return Verdict(outcome, "", letter)


def score_short(item: Item, reply: Reply) -> Verdict:
    checked = _precheck(reply)
    if isinstance(checked, Verdict):
        return checked
    got = normalise(checked)
    if not got:
        return Verdict("unparsed", f"empty answer: {checked!r}", checked)
    gold = {normalise(alias) for alias in item.answer["aliases"]}
    return Verdict("correct" if got in gold else "wrong", "", checked)


SCORERS = {"knowledge_mcq": score_mcq, "knowledge_short": score_short}
