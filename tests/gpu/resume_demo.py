"""Kill `bocast measure` with SIGKILL mid-run, restart it, and check the store: no finished row
lost, none measured twice. Works with the GPU runner (H100) or the stand-in (CPU).

    python3 -m tests.gpu.resume_demo --store $OUT/resume.db --runner local --sample 60 \
        --kill-at 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time


def rows(path: str) -> list[tuple]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        out = conn.execute("SELECT id, key, created FROM measurements ORDER BY id").fetchall()
        conn.close()
        return out
    except sqlite3.Error:
        return []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--runner", default="local")
    ap.add_argument("--shape", default="1024,1024,1024")
    ap.add_argument("--sample", type=int, default=60)
    ap.add_argument("--kill-at", type=int, default=20)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "bocast.cli", "measure", "gemm", "--shape", args.shape,
           "--sample", str(args.sample), "--seed", "5", "--store", args.store,
           "--runner", args.runner, "--batch", "8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while len(rows(args.store)) < args.kill_at and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = rows(args.store)
    done = subprocess.run(cmd, capture_output=True, text=True)
    after = rows(args.store)
    result = {"rows_at_kill": len(before), "rows_after_resume": len(after),
              "finished_rows_kept": after[:len(before)] == before,
              "distinct_keys": len({k for _, k, _ in after}), "sample": args.sample,
              "resume_exit_code": done.returncode}
    result["ok"] = (result["finished_rows_kept"] and len(after) == args.sample
                    and result["distinct_keys"] == args.sample and done.returncode == 0)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
