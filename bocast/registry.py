"""Looking a name up in a registry of named classes (operators, strategies)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def lookup(known: Mapping[str, T], name: str, what: str, error: type[Exception]) -> T:
    """``known[name]``; else ``error`` saying "unknown {what} 'name'; known: ..." (the names in
    ``known``'s order)."""
    if name not in known:
        raise error(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return known[name]


#: the entry-point groups whose plugins were imported in this process: name -> what it loaded
_LOADED: dict[str, dict[str, Any]] = {}


def load_plugins(group: str, error: type[Exception]) -> dict[str, Any]:
    """Import what installed packages name under entry-point group ``group``
    (``bocast.strategies``, ``bocast.operators``, ``bocast.runners``; docs/extending.md) and
    return each plugin's object by its entry point's name: importing a strategy's or an
    operator's module registers what it defines, as the shipped ones register themselves; a
    runner's entry point names its class (:mod:`bocast.measure.kinds`). Once a group per
    process; a plugin that fails to import is one ``error`` naming it and its entry point, not
    a traceback from inside bocast."""
    if group in _LOADED:
        return _LOADED[group]
    _LOADED[group] = loaded = {}
    from importlib.metadata import entry_points

    for ep in entry_points(group=group):
        try:
            loaded[ep.name] = ep.load()
        except Exception as e:  # the plugin's own failure, whatever it is: name the plugin
            del _LOADED[group]  # asked again, it fails again (not an empty group)
            raise error(f"plugin {ep.name!r} ({ep.value}, entry point group {group}) failed "
                        f"to import: {type(e).__name__}: {e}") from e
    return loaded
