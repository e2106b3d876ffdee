"""The argument types of ``bocast serve`` (:mod:`bocast.measure.rpc.server`): each an argparse
type whose error names what is wrong with the value (a port, seconds, a host that resolves, a
tracker address, a GPU list, a worker)."""

from __future__ import annotations

import argparse
import importlib.util
import math

from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc.service import WORKERS


def arg(check):
    """An argparse type from ``check`` (text -> value, ValueError naming what is wrong)."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return parse


def int_in(lo: int, hi: int, what: str):
    def check(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = lo - 1
        if not lo <= v <= hi:
            raise ValueError(f"expected {what}")
        return v
    return arg(check)


port = int_in(0, 65535, "a port, 0 to 65535 (0: any free port)")
port_end = int_in(1, 65536, "a port, 1 to 65536 (the end of the range, not included)")
build_workers = int_in(0, 1024, "a number of build processes, 0 to 1024 (0: no builds here)")


@arg
def seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 1e6):
        raise ValueError("expected a number of seconds, above 0 and at most 1e6")
    return v


def resolvable(host: str) -> str:
    try:
        auth.resolve(host)
    except (OSError, UnicodeError):
        raise ValueError(f"host {host!r} does not resolve to an address") from None
    return host


host = arg(resolvable)


@arg
def tracker_addr(text: str) -> str:
    host, port = proto.parse_addr(text)
    if not 1 <= port <= 65535:
        raise ValueError("expected HOST:PORT with a port 1 to 65535")
    resolvable(host)
    return text


@arg
def word(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError("expected a non-empty word without spaces")
    return text


@arg
def worker(text: str) -> str:
    if text in WORKERS:
        return text
    module, colon, function = text.partition(":")
    try:
        found = bool(colon and module and function) and importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"expected {', '.join(WORKERS)} or an importable MODULE:FUNCTION")
    return text


@arg
def gpu_list(text: str) -> str:
    if text == "all":
        return text
    gpus = text.split(",")
    # what CUDA_VISIBLE_DEVICES takes: indices, GPU and MIG UUIDs
    if not all(g.isdigit() or g.startswith(("GPU-", "MIG-")) for g in gpus):
        raise ValueError("expected all, or GPU indices or UUIDs separated by commas (0,1,2)")
    if len(set(gpus)) < len(gpus):
        raise ValueError("a GPU listed twice")
    return text
