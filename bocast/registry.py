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


#: the entry-point groups whose plugins were imported in this process
_LOADED: set[str] = set()


def load_plugins(group: str, error: type[Exception]) -> None:
    """Import what installed packages name under entry-point group ``group``
    (``bocast.strategies``, ``bocast.operators``; docs/extending.md): importing a plugin's
    module registers the strategies or operators it defines, as the shipped ones register
    themselves. Once a group per process; a plugin that fails to import is one ``error`` naming
    it and its entry point, not a traceback from inside bocast."""
    if group in _LOADED:
        return
    _LOADED.add(group)
    from importlib.metadata import entry_points

    for ep in entry_points(group=group):
        try:
            ep.load()
        except Exception as e:  # the plugin's own failure, whatever it is: name the plugin
            raise error(f"plugin {ep.name!r} ({ep.value}, entry point group {group}) failed "
                        f"to import: {type(e).__name__}: {e}") from e
