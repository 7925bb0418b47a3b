"""The information a turn's answer must carry: facts drawn from the oracle's results, found in the answer text.

A **fact** is a list of alternatives, any one of which must appear in the assistant's answer: a
balance of ``426156`` cents is ``[426156, 4261.56]``, a day is ``["2026-01-06", "January 6", ...]``,
an empty search is the words a model uses to say so. Strings match case-insensitively on word
boundaries; numbers match any number written in the text (``4,261.56``) at the precision it is
written with (``21.4`` for 21.37; an integer only as itself).

`answer_facts` derives them from the last successful call of a read-only turn (the one whose result
answers the user), by rule:

- a scalar result: itself (a string of at most 80 characters; booleans and longer text are not facts);
- an object with one field: that field's value, by these rules (``{"matches": [...]}``);
- an object: its name-like field (``name``, ``title``, ...) and its first number that is not an id,
  or else its first short string that is not an id;
- a list: the names of its first three items (or its first three scalars), else how many there are;
  an empty list: that nothing was found.

Records may carry their own facts (``Turn.facts``, ``facts`` in a ground truth); these rules are
what synthesis writes when it records a turn.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

Fact = list[str | int | float]
NAME_KEYS = ("name", "full_name", "title", "display_name", "subject", "label", "symbol", "city", "status")
NOTHING = ["nothing", "no", "none", "not any", "empty", "0", "zero", "couldn't find", "could not find", "[]"]
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
MAX_TEXT = 80  # longer strings are content, not facts an answer repeats word for word
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])-?\d+(?:\.\d+)?")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def _is_id(key: str) -> bool:
    return key == "id" or key.endswith(("_id", "_ids"))


def _alternatives(key: str, value: Any) -> Fact:
    """The ways an answer may state `value` (the field `key` holds it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        forms: Fact = [value]
        if key.endswith("_cents"):
            forms.append(round(value / 100, 2))
        return forms
    text = str(value)
    forms = [text]
    for parse in (date.fromisoformat, datetime.fromisoformat):
        try:
            moment = parse(text[:10] if parse is date.fromisoformat else text)
        except ValueError:
            continue
        month = MONTHS[moment.month - 1]
        forms += [text[:10], f"{month} {moment.day}", f"{moment.day} {month}", f"{month[:3]} {moment.day}"]
        break
    return list(dict.fromkeys(forms))


def _short(value: Any) -> bool:
    """A scalar an answer can be expected to repeat as it is (not a paragraph)."""
    if isinstance(value, bool) or value is None:
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and 0 < len(value.strip()) <= MAX_TEXT)


def _name_key(item: dict[str, Any]) -> str | None:
    return next((k for k in NAME_KEYS if isinstance(item.get(k), str) and _short(item[k])), None)


def value_facts(value: Any, key: str = "") -> list[Fact]:
    """The facts of one result value (the rules of the module docstring)."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, value),) = (
            value.items()
        )  # {"matches": [...]}, {"user_id": "USR002"}: the one field is the answer
        return value_facts(value, key)
    if not isinstance(value, dict | list):
        return [_alternatives(key, value)] if _short(value) else []
    if isinstance(value, dict):
        facts: list[Fact] = []
        name = _name_key(value)
        if name is not None:
            facts.append(_alternatives(name, value[name]))
        number = next(
            (
                k
                for k, v in value.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and not _is_id(k)
            ),
            None,
        )
        if number is not None:
            facts.append(_alternatives(number, value[number]))
        if not facts:
            text = next(
                (k for k, v in value.items() if isinstance(v, str) and _short(v) and not _is_id(k)), None
            )
            facts += [_alternatives(text, value[text])] if text is not None else []
        return facts
    if not value:
        return [list(NOTHING)]
    named = [
        _alternatives(k, item[k])
        for item in value[:3]
        if isinstance(item, dict)
        for k in [_name_key(item)]
        if k
    ]
    if named:
        return named
    scalars = [v for v in value[:3] if _short(v)]
    if scalars:
        return [_alternatives(key, v) for v in scalars]
    count = len(value)
    return [[count, NUMBER_WORDS[count]] if count < len(NUMBER_WORDS) else [count]]


def answer_facts(results: Sequence[Any]) -> list[Fact]:
    """The facts of a read-only turn, from its successful calls' results in order: the last one's."""
    return value_facts(results[-1]) if results else []


def unit_facts(given: list[Fact] | None, results: Sequence[Any], read_only: bool) -> list[Fact]:
    """A unit's facts: the record's own (`given`), or derived from its results when it is read-only."""
    if given is not None:
        return given
    return answer_facts(results) if read_only else []


# ----------------------------------------------------------------------------------------- finding
def normalize(text: str) -> str:
    """Lower case, compatibility forms (NFKC), one space between words: what facts are searched in."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def answer_text(text: str) -> str:
    """The part of a model's text that is its answer: reasoning (``<think>``) left out."""
    return _THINK.sub(" ", text or "")


def numbers_in(text: str) -> list[tuple[float, int]]:
    """Every number written in `text`, with the count of its decimals."""
    found = []
    for match in _NUMBER.finditer(text):
        raw = match.group().replace(",", "")
        decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
        found.append((float(raw), decimals))
    return found


def _number_found(value: float, numbers: Iterable[tuple[float, int]]) -> bool:
    for written, decimals in numbers:
        if decimals == 0 and not float(value).is_integer():
            continue
        if math.isclose(round(value, decimals), written, rel_tol=1e-9, abs_tol=1e-9):
            return True
    return False


def _text_found(value: str, text: str) -> bool:
    needle = normalize(value)
    if not needle:
        return False
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", text) is not None


def fact_found(fact: Fact, text: str, numbers: list[tuple[float, int]] | None = None) -> bool:
    """Whether any alternative of `fact` appears in `text` (already `normalize`d)."""
    numbers = numbers_in(text) if numbers is None else numbers
    for alternative in fact:
        if isinstance(alternative, bool):
            continue
        if isinstance(alternative, int | float):
            if _number_found(float(alternative), numbers):
                return True
        elif _text_found(alternative, text):
            return True
    return False


def missing_facts(facts: Sequence[Fact], answer: str) -> list[Fact]:
    """The facts `answer` does not state."""
    text = normalize(answer_text(answer))
    numbers = numbers_in(text)
    return [f for f in facts if not fact_found(f, text, numbers)]


def render_facts(facts: Sequence[Fact]) -> str:
    """The facts as an answer states them (each fact's first alternative)."""
    return ", ".join(str(f[0]) for f in facts if f)


def with_facts(answer: str, facts: Sequence[Fact]) -> str:
    """`answer`, completed with the facts it does not state (an answer recorded before facts were checked)."""
    missing = missing_facts(facts, answer)
    if not missing:
        return answer
    return f"{answer.rstrip()} {render_facts(missing)}".strip()


__all__ = [
    "Fact",
    "answer_facts",
    "answer_text",
    "missing_facts",
    "render_facts",
    "unit_facts",
    "value_facts",
    "with_facts",
]
