"""Tasks for the pool tests (importable by spawned workers)."""


def task(t):
    if t["do"] == "raise":
        raise RuntimeError("boom")
    return t["v"]
