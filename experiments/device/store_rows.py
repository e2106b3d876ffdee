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


def remeasure_tables(root: str) -> None:
    """Print each re-timing under ``root`` (``remeasure_*.json``, `bocast remeasure`'s files):
    the reference's TFLOPS, then a row a kernel (its picks name, the median TFLOPS [min-max],
    the ratio, the status); and the last lines of each log without a result."""
    import glob
    import os

    for path in sorted(glob.glob(f"{root}/remeasure_*.json")):
        with open(path) as f:
            r = json.load(f)
        ref = r["cublas_tflops"]
        print(f"{','.join(map(str, r['workload']['shape']))} {r['workload'].get('dtype')}: "
              f"cuBLAS {ref['median']:.1f} TFLOPS [{ref['min']:.1f}-{ref['max']:.1f}]")
        print("| kernel | median TFLOPS [min-max] | / cuBLAS | status |")
        print("| --- | --- | --- | --- |")
        for k in r["kernels"]:
            m = k.get("remeasured")
            got = f"{m['median']:.1f} [{m['min']:.1f}-{m['max']:.1f}]" if m else "-"
            frac = f"{k['fraction_of_cublas']:.3f}" if m else "-"
            status = k["build_status"] + ("; " + k["errors"][0][:80] if k.get("errors") else "")
            print(f"| {k['store']} | {got} | {frac} | {status} |")
        print()
    for log in sorted(glob.glob(f"{root}/remeasure_*.log")):
        if not os.path.exists(log.replace(".log", ".json")):
            print(f"{os.path.basename(log)}: no result; its last lines:")
            with open(log) as f:
                print("".join(f.readlines()[-6:]))
