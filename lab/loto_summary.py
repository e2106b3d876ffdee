"""One table of issue 26's leave-one-table-out replay: per table, each arm's median trials to 95%
of the table's best (ablation results JSONs, as written or xz-compressed as tracked), the arms
of several results side by side.

    python lab/loto_summary.py experiments/results/loto_summary.md \
        experiments/results/loto.json.xz:bo,bo-auto,bo-auto-top16,cga-auto \
        experiments/results/loto_b16.json.xz:bo,bo-auto,bo-auto-half,bo-auto-rows,cga-auto \
        experiments/results/loto_b32.json.xz:bo-auto-half \
        experiments/results/loto_final.json.xz:bo,bo-auto-half
"""

from __future__ import annotations

import json
import lzma
import os
import sys


def main(out: str, items: list[str]) -> None:
    cols, tables, notes = [], {}, []
    for item in items:
        path, _, labels = item.partition(":")
        with (lzma.open if path.endswith(".xz") else open)(path, "rt") as f:
            res = json.load(f)
        tag = f"b{res['batch_size']} x{res['seeds']}"  # batch, seeds
        sha = res["provenance"].get("git_sha", "?")[:12]
        name = os.path.basename(path).removesuffix(".xz")
        notes.append(f"`{name}`: batch {res['batch_size']}, {res['seeds']} "
                     f"seeds, budget {res['budget']}, at {sha}")
        for lab in labels.split(","):
            cols.append(f"{lab} {tag}")
            for t in res["tables"]:
                v = t["variants"][lab]
                name = t["table"].replace("experiments/data/", "")
                cell = f"{v['median_trials_to_95pct']:.0f}"
                if v.get("median_trials_to_ref_level") is not None and lab != res["reference"]:
                    cell += f" ({v['share_ref_level_within']:.1f})"
                tables.setdefault(name, {})[f"{lab} {tag}"] = cell
    lines = ["# Warm start auto, leave one table out: trials to 95% of the table's best", "",
             "Median over paired seeds (budget + 1 when not reached within the budget); in "
             "brackets, the share of seeds whose warm run reaches 95% of cold BO's best at its "
             "reference budget (200) within 16 trials. A column is an arm at batch b over x "
             "seeds. " + "; ".join(notes) + ".", "",
             "| table | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, row in tables.items():
        lines.append(f"| {name} | " + " | ".join(row.get(c, "-") for c in cols) + " |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
