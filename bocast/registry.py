"""Looking a name up in a registry of named classes (operators, strategies)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def lookup(known: Mapping[str, T], name: str, what: str, error: type[Exception]) -> T:
    """``known[name]``; else ``error`` saying "unknown {what} 'name'; known: ..." (the names in
    ``known``'s order)."""
    if name not in known:
        raise error(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return known[name]
