"""The results folder's record of a device call: every tune folder under the given roots (a
summary.json beside a records.db) compacted to what a README cites (workload, reference, trials,
figure, best, ratio, the in-run figure, best configuration, clocks, provenance, each re-timed
kernel's ratios), one JSON object keyed by folder name; the stores and readings stay in the
call's tarball. Run here, after the call:
    python3 experiments/device/compact_summaries.py OUT.json ROOT [ROOT ...]"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_rows import store  # noqa: E402

out = {}
for root in sys.argv[2:]:
    for summary in sorted(glob.glob(f"{root}/**/summary.json", recursive=True)):
        folder = os.path.dirname(summary)
        with open(summary) as f:
            s = json.load(f)
        w, ref, _ = store(f"{folder}/records.db")
        out[os.path.basename(folder)] = {
            "workload": w, "reference": ref.get("what"), "trials": s.get("trials"),
            "status": s.get("status"), "figure": s.get("figure"),
            "best_tflops": s.get("best_tflops"), "reference_tflops": s.get("reference_tflops"),
            "best_vs_reference": s.get("best_vs_reference"), "in_run": s.get("in_run"),
            "best_config": s.get("best_config"), "clocks": s.get("clocks"),
            "seed": s.get("seed"), "seconds": s.get("seconds"), "gpu": s.get("gpu"),
            "provenance": {k: (s.get("provenance") or {}).get(k)
                           for k in ("date", "git_sha", "versions")},
            "retimed_kernels": [{k: kern.get(k) for k in ("vs_reference", "ratios", "tflops",
                                                          "in_run_tflops")}
                                for kern in (s.get("retimed") or {}).get("kernels", [])]}
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
print(f"{len(out)} runs -> {sys.argv[1]}")
