"""Tasks for the pool tests (importable by spawned workers)."""


def task(t):
    if t["do"] == "import":  # the names of t["libs"] this worker can import (and does)
        import importlib

        can = []
        for lib in t["libs"]:
            try:
                importlib.import_module(lib)
                can.append(lib)
            except ImportError:
                pass
        return can
    if t["do"] == "raise":
        raise RuntimeError("boom")
    return t["v"]
