"""SIGINT at random moments, the way Ctrl-C sends it (to the whole process group), then the same
command again, until it finishes; checks after every stop that nothing finished was lost or
measured twice.

Two commands: a replay comparison (BO, CGA and random search, 5 seeds, budget 128, in job
processes; the tests use 3 seeds and budget 96) and ``bocast measure`` with the CPU stand-in
runner (TVM lowering in builder processes, synthetic timings in a runner process). For each
stop: the exit code (130), the last stderr line, a traceback (none), processes left behind
(none), and per record store: every row there before the stop is there after it, unchanged and
in order; no configuration is in a store twice; no row records a failure (the stand-in and the
dataset rows used here never fail, so a failure row would be an interrupted build or run
recorded as a failure). The last, uninterrupted call must finish every run and write the
results.

    python -m tests.interrupt_harness --moments 20        # -> experiments/results/interrupts.*
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMPARE = {
    "name": "interrupts",
    "workload": {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
                 "space": "v1"},
    "runner": "replay",
    "dataset": "gemm_32_2048_1000",  # a shipped dataset, by its name
    "strategies": [{"label": "bo", "name": "bo", "n_init": 16, "pool_size": 256,
                    "fit_maxiter": 20},
                   {"label": "cga", "name": "cga", "pop_size": 64, "generations": 2},
                   {"label": "random", "name": "random"}],
    "seeds": 3, "budget": {"trials": 96}, "batch_size": 16, "baseline": "cga",
}
MEASURE_SAMPLE = 60


def compare_command(folder: str, seeds: int = 3, trials: int = 96) -> list[str]:
    import yaml

    path = os.path.join(folder, "compare.yaml")
    if not os.path.exists(path):
        with open(path, "w") as f:
            yaml.safe_dump({**COMPARE, "seeds": seeds, "budget": {"trials": trials},
                            "output": os.path.join(folder, "runs"),
                            "results": os.path.join(folder, "res", "interrupts")}, f)
    return ["compare", path, "--json"]


def measure_command(folder: str, sample: int = MEASURE_SAMPLE) -> list[str]:
    return ["measure", "gemm", "--shape", "64,64,64", "--space", "v2", "--sample", str(sample),
            "--seed",
            "7", "--store", os.path.join(folder, "m.db"), "--runner", "standin", "--batch", "4",
            "--workers", "2"]


def stores(folder: str) -> dict[str, list[tuple]]:
    """Every record store under ``folder``: its rows (id, key, status, created) in order."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".db"):
                path = os.path.join(dirpath, name)
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                try:
                    out[os.path.relpath(path, folder)] = conn.execute(
                        "SELECT id, key, status, created FROM measurements ORDER BY id").fetchall()
                except sqlite3.Error:
                    out[os.path.relpath(path, folder)] = []  # created, tables not yet written
                finally:
                    conn.close()
    return out


def check(before: dict[str, list], after: dict[str, list]) -> dict[str, int]:
    lost = 0
    for p, rows in before.items():
        kept = set(after.get(p, []))
        lost += sum(r not in kept for r in rows)
    rewritten = sum(after.get(p, [])[:len(rows)] != rows for p, rows in before.items())
    twice = sum(len(rows) - len({r[1] for r in rows}) for rows in after.values())
    failed = sum(r[2] != "ok" for rows in after.values() for r in rows)
    return {"lost": lost, "stores_rewritten": rewritten, "measured_twice": twice,
            "failure_rows": failed, "rows": sum(len(r) for r in after.values())}


def run(argv: list[str], *, delay: float | None, env: dict[str, str],
        when=None) -> dict[str, Any]:
    """One call of ``bocast``; with ``delay``, SIGINT to its process group after that long (or,
    with ``when``, as soon as ``when()`` is true, polled every 0.1 s)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    sent = False
    if when is not None:
        while proc.poll() is None and not when():
            time.sleep(0.1)
        delay = round(time.perf_counter() - t0, 2)
    if delay is not None:
        try:
            proc.wait(timeout=max(delay - (time.perf_counter() - t0), 0.01))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            sent = True
    out, err = proc.communicate(timeout=900)
    left = True  # anything of its process group alive 5 s after the command ended
    for _ in range(50):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            left = False
            break
        time.sleep(0.1)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    lines = err.strip().splitlines()
    return {"delay_s": delay, "signal_sent": sent, "exit": proc.returncode,
            "seconds": round(time.perf_counter() - t0, 2),
            "last_stderr_line": lines[-1] if lines else "", "traceback": "Traceback" in err,
            "stdout_lines": len(out.strip().splitlines()), "processes_left": left}


def experiment(name: str, command, moments: int, total: int, seed: int,
               env: dict[str, str]) -> dict[str, Any]:
    """``moments`` stops, each at a random moment: a quarter of them 0.2-3 s after the start
    (while processes start and stores open), the others when a random number of new rows
    (1 .. what is left, spread over the moments still to come) has reached the stores."""
    folder = tempfile.mkdtemp(prefix=f"bocast-int-{name}-")
    rng = random.Random(seed)
    stops = []
    try:
        before = stores(folder)
        for i in range(moments):
            rows = sum(map(len, before.values()))
            if rng.random() < 0.25 or rows >= total - 1:
                delay, target = round(rng.uniform(0.2, 3.0), 2), None
            else:
                step = max(1, (total - rows) // max(1, moments - i))
                delay, target = None, min(total - 1, rows + rng.randint(1, max(1, 2 * step - 1)))

            def when(target=target):
                return sum(map(len, stores(folder).values())) >= target

            r = run(command(folder), delay=delay, env=env,
                    when=when if target is not None else None)
            r["target_rows"] = target
            after = stores(folder)
            r.update(check(before, after))
            r["clean"] = (not r["traceback"] and not r["processes_left"] and r["lost"] == 0
                          and r["stores_rewritten"] == 0 and r["measured_twice"] == 0
                          and r["failure_rows"] == 0
                          and (r["exit"] == 130 and r["last_stderr_line"].startswith(
                              "bocast: interrupted") and r["stdout_lines"] == 0
                              if r["signal_sent"] else r["exit"] == 0))
            stops.append(r)
            print(f"{name} stop {i + 1}: after {r['delay_s']} s (target {target} rows) exit "
                  f"{r['exit']}, {r['rows']} rows, "
                  f"lost {r['lost']}, twice {r['measured_twice']}, failure rows "
                  f"{r['failure_rows']}, left {r['processes_left']}"
                  + ("" if r["clean"] else "  <- NOT CLEAN"), flush=True)
            before = after
        final = run(command(folder), delay=None, env=env)
        after = stores(folder)
        final.update(check(before, after))
        results = [p for p in os.listdir(os.path.join(folder, "res"))] \
            if os.path.isdir(os.path.join(folder, "res")) else []
        final["result_files"] = sorted(results)
        final["clean"] = (final["exit"] == 0 and final["lost"] == 0
                          and final["measured_twice"] == 0 and final["failure_rows"] == 0)
        print(f"{name} final: exit {final['exit']}, {final['rows']} rows, lost {final['lost']}, "
              f"twice {final['measured_twice']}", flush=True)
        return {"stops": stops, "final": final, "stores": {p: len(r) for p, r in after.items()}}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moments", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results", "interrupts"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from bocast.records.public import provenance

    prov = provenance({"cpus": os.cpu_count(), "machine": platform.machine(),
                       "load_average": os.getloadavg()})
    env = {**os.environ, "PYTHONPATH": ROOT}
    expected = {"compare": 3 * 5 * 128, "measure": MEASURE_SAMPLE}
    compare = experiment("compare", lambda folder: compare_command(folder, 5, 128),
                         args.moments, expected["compare"], args.seed, env)
    measure = experiment("measure", measure_command, args.moments, expected["measure"],
                         args.seed + 1, {**env, "BOCAST_STANDIN_SLEEP": "0.2"})
    summary = {}
    for name, res in (("compare", compare), ("measure", measure)):
        stops = res["stops"]
        summary[name] = {
            "stops": len(stops), "signals_sent": sum(s["signal_sent"] for s in stops),
            "clean_stops": sum(s["clean"] for s in stops),
            "lost": sum(s["lost"] for s in stops) + res["final"]["lost"],
            "measured_twice": max([s["measured_twice"] for s in stops] +
                                  [res["final"]["measured_twice"]]),
            "failure_rows": res["final"]["failure_rows"],
            "final_rows": res["final"]["rows"], "expected_rows": expected[name],
            "final_clean": res["final"]["clean"],
            "stops_with_work_left": sum(s["rows"] < expected[name] for s in stops),
            "result_files": res["final"].get("result_files", [])}
    with open(args.out + ".json", "w") as f:
        json.dump({"provenance": prov, "summary": summary, "compare": compare,
                   "measure": measure}, f, separators=(",", ":"), default=str)
    md = ["# SIGINT at random moments", "",
          f"`python -m tests.interrupt_harness --moments {args.moments} --seed {args.seed}` at "
          f"commit {prov['git_sha']}, {prov['date']}, on {prov['host']} ({os.cpu_count()} CPUs, "
          f"no GPU; load average {', '.join(f'{x:.1f}' for x in prov['load_average'])} when "
          "it started). SIGINT goes to the command's process group, as Ctrl-C sends it; the "
          "same command is then run again. Clean stop = exit 130, last stderr line "
          "`bocast: interrupted ...`, no traceback, nothing on stdout, no process left, and in "
          "every record store no row lost or changed, none twice, no failure row.", "",
          "| command | stops | signal sent (else it had finished) | stops with trials left | "
          "clean | rows lost | measured twice | failure rows | rows at the end / expected | "
          "final call |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        md.append(f"| {name} | {s['stops']} | {s['signals_sent']} | "
                  f"{s['stops_with_work_left']} | {s['clean_stops']} | "
                  f"{s['lost']} | {s['measured_twice']} | {s['failure_rows']} | "
                  f"{s['final_rows']} / {s['expected_rows']} | "
                  f"{'clean' if s['final_clean'] else 'NOT CLEAN'}"
                  + (f", wrote {', '.join(s['result_files'])}" if s["result_files"] else "")
                  + " |")
    md += ["", "Per stop: seconds after the start when the signal went (at a random time, or "
           "when the stores reached a random number of rows), exit code, rows in the stores "
           "afterwards:", ""]
    for name, res in (("compare", compare), ("measure", measure)):
        md.append(f"- {name}: " + "; ".join(
            f"{s['delay_s']} s"
            f"{'' if s['target_rows'] is None else ' (rows ' + str(s['target_rows']) + ')'}"
            f" -> {s['exit']}, {s['rows']}" for s in res["stops"]))
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
