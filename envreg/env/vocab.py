"""The catalog's shared vocabulary: values that mean the same thing in every environment.

A `city` one environment returns is a `city` another accepts (maps -> hotel -> rides -> weather), and
so are `currency` and `email`; keeping them here keeps those chains valid when one environment changes.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

City = Literal[
    "San Francisco",
    "New York",
    "Chicago",
    "Seattle",
    "Boston",
    "Austin",
    "London",
    "Paris",
    "Berlin",
    "Madrid",
    "Tokyo",
    "Sydney",
]
CITIES: tuple[str, ...] = get_args(City)
Currency = Literal["USD", "EUR", "GBP", "JPY", "AUD"]
EMAIL = r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$"
"""An address with a name, a domain and a top-level domain of letters."""
Email = Annotated[str, Field(max_length=254, pattern=EMAIL)]

__all__ = ["CITIES", "EMAIL", "City", "Currency", "Email"]
