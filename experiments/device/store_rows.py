"""What the device scripts' last tables read from a bocast record store (one definition for
all of them): its workload, its reference reading, one row per measurement. A script's heredoc
runs from the repository's root: ``sys.path.insert(0, "experiments/device")`` first."""

import json
import sqlite3


def store(db: str, *, tflops: bool = False):
    """(workload, reference, rows) of store ``db``; a row is (config, status, rel_error), with
    the TFLOPS last when ``tflops``."""
    con = sqlite3.connect(db)
    try:
        meta = dict(con.execute("select name, value from meta"))
        rows = [(json.loads(c), st, err, tf)[:4 if tflops else 3] for c, st, err, tf in
                con.execute("select config, status, rel_error, tflops from measurements")]
    finally:
        con.close()
    return json.loads(meta.get("workload", "{}")), json.loads(meta.get("reference") or "{}"), rows


def worst_ok(rows):
    """The largest relative error of the rows that are ok (None if none has one)."""
    return max((r[2] for r in rows if r[1] == "ok" and r[2] is not None), default=None)
