"""How much each knob matters in a uniform table (v2 or v3): the share of the variance of log TFLOPS
that a knob's value explains (one-way eta^2), and per value the median TFLOPS and the share of
its rows in the table's top decile. Prints a markdown table; the exhaustive tables' fixed knobs
were chosen with it (README.md).

    python experiments/exhaustive/knob_impact.py gemm_4096_4096_4096_v2 ...   # shipped names
"""

from __future__ import annotations

import sys

import numpy as np

from bocast.records.public import load_dataset


def impact(prefix: str) -> list[str]:
    df, meta = load_dataset(prefix)
    df = df[df.status == "ok"].copy()
    df["ly"] = np.log(df.tflops)
    top = df.tflops.quantile(0.9)
    total = ((df.ly - df.ly.mean()) ** 2).sum()
    lines = [f"`{prefix}` ({len(df)} ok rows; top decile >= {top:.1f} TFLOPS)", "",
             "| knob | eta^2 | value: median TFLOPS / top-decile share |", "|---|---|---|"]
    for k in (c for c in meta["knob_columns"] if not c.startswith("tile_")):
        g = df.groupby(df[k].astype(str), dropna=False)
        eta = float((g.ly.count() * (g.ly.mean() - df.ly.mean()) ** 2).sum() / total)
        cells = [f"{v}: {grp.tflops.median():.0f} / {(grp.tflops >= top).mean():.2f}"
                 for v, grp in g]
        lines.append(f"| {k} | {eta:.3f} | {'; '.join(cells)} |")
    return lines + [""]


if __name__ == "__main__":
    for prefix in sys.argv[1:]:
        print("\n".join(impact(prefix)))
