"""The table of bad inputs: every case of ``tests/bad_input_cases.py`` run as a user would, one
``bocast`` subprocess each in a fresh folder (the tests run the same cases in-process).

    python lab/bad_inputs.py                # all cases -> the table
    python lab/bad_inputs.py --only store   # cases whose name contains "store"

The table goes to ``experiments/results/bad_inputs.{md,json.xz}`` with the machine and commit.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results", "bad_inputs"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from bocast.records.public import provenance
    from tests.bad_input_cases import cases, run_case

    prov = provenance({"cpus": os.cpu_count(), "machine": platform.machine()})
    todo = [c for c in cases() if not args.only or args.only in c.name]
    results = []
    for case in todo:
        r = run_case(case)
        results.append(r)
        print(f"{'ok ' if r.clean else 'BAD'} {r.code} {r.seconds:5.1f} s  {case.name}"
              + ("" if r.clean else f"  <- {r.problems}"), flush=True)
    clean = sum(r.clean for r in results)
    print(f"{clean}/{len(results)} clean")
    if args.only:
        return
    rows = [{"case": r.case, "group": r.group, "command": r.command, "exit": r.code,
             "message": r.stderr.strip(), "data_intact": r.intact and not r.created,
             "seconds": round(r.seconds, 2), "clean": r.clean, "problems": r.problems}
            for r in results]
    slowest = max(results, key=lambda r: r.seconds)
    # xz: the results travel with the tree to the GPU machine, under a size limit
    with lzma.open(args.out + ".json.xz", "wt") as f:
        json.dump({"provenance": prov, "clean": clean, "cases": len(rows), "rows": rows}, f,
                  separators=(",", ":"))
    md = [f"# Bad inputs: {clean} of {len(rows)} clean", "",
          f"`python lab/bad_inputs.py` at commit {prov['git_sha']}, {prov['date']}, on "
          f"{prov['host']} ({os.cpu_count()} CPUs, no GPU). Each case runs `bocast` once in a "
          "fresh folder; clean = exit 2, one line on stderr naming the problem, no traceback, "
          "nothing on stdout, every file it was given byte-identical and nothing created. "
          f"Slowest refusal: {slowest.seconds:.1f} s ({slowest.case}). "
          "Interrupts: `experiments/results/interrupts.md`.", "",
          "| # | bad input | exit | message (stderr) | seconds | data intact | clean |",
          "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        msg = r["message"].replace("|", "\\|").replace("\n", " / ")
        md.append(f"| {i} | {r['case']} | {r['exit']} | {msg} | {r['seconds']:.1f} | "
                  f"{'yes' if r['data_intact'] else 'NO'} | {'yes' if r['clean'] else 'NO'} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {args.out}.md/.json.xz")


if __name__ == "__main__":
    main()
