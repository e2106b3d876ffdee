"""A discrete-event simulation of a tune on a fleet of build workers (issue 41): why the
pipelined loop (bocast/run/pipeline.py) and how it compares with the batch loop and with fully
asynchronous refills. Nothing here is measured: the figures of docs/rpc.md's "pipelined loop"
come from it, with kernels that build and time in 1.4 s at the median (lognormal, sigma 0.39:
3.5 s at the 99th percentile, as on the H200: experiments/results/fleet_scaling_h200x2) and
a proposal of 0.35 s + 4 ms per configuration.

    python lab/fleet_sim.py        # trials per second of 320 trials on 16, 32 and 64 workers

- batch: ask a batch of ``slots``, build and time it on ``slots`` workers, wait for the last,
  re-time the reference (0.2 s), ask the next;
- window (q, k): k batches of q asked and not yet told, told in order, each tell followed by the
  next ask (in a thread of its own); workers take the queue's next kernel when free;
- async: a batch of q asked after every q results, whatever their batch (timing-dependent).
"""

from __future__ import annotations

import heapq

import numpy as np

MEDIAN_S, SIGMA, TIME_S = 1.4, 0.39, 0.045


def ask_s(n: int) -> float:
    return 0.35 + 0.004 * n


def simulate(slots: int, q: int, k: int, *, trials: int = 320, seed: int = 0,
             mode: str = "window") -> float:
    """Trials per second of the window (or, ``mode="async"``, asynchronous) loop."""
    rng = np.random.default_rng(seed)
    events: list = []  # (time, kind, payload): kind 1 a batch asked, 2 a kernel done
    sizes: list[list[int]] = []  # per batch: [asked, done]
    state = {"asked": 0, "asker_free": 0.0, "told": 0}

    def ask(now: float) -> None:
        n = min(q, trials - state["asked"])
        if n <= 0:
            return
        start = max(now, state["asker_free"])
        state["asker_free"] = start + ask_s(n)
        sizes.append([n, 0])
        state["asked"] += n
        heapq.heappush(events, (state["asker_free"], 1, (len(sizes) - 1, n)))

    for _ in range(k):
        ask(0.0)
    free, queue, done, oldest, last = slots, [], 0, 0, 0.0
    while done < trials:
        now, kind, payload = heapq.heappop(events)
        if kind == 1:
            queue += [payload[0]] * payload[1]
        else:
            free += 1
            done += 1
            sizes[payload][1] += 1
            if mode == "window":
                while oldest < len(sizes) and sizes[oldest][1] == sizes[oldest][0]:
                    oldest += 1
                    ask(now)
            else:
                state["told"] += 1
                if state["told"] % q == 0:
                    ask(now)
        while free and queue:
            free -= 1
            took = MEDIAN_S * np.exp(SIGMA * rng.standard_normal()) + TIME_S
            heapq.heappush(events, (now + took, 2, queue.pop(0)))
        last = now
    return trials / last


def batch_loop(slots: int, *, trials: int = 320, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    t, n = 0.0, 0
    while n < trials:
        b = min(slots, trials - n)
        t += ask_s(b)
        ends = [0.0] * slots
        for _ in range(b):
            i = int(np.argmin(ends))
            ends[i] += MEDIAN_S * np.exp(SIGMA * rng.standard_normal()) + TIME_S
        t += max(ends) + 0.2
        n += b
    return trials / t


if __name__ == "__main__":
    seeds = range(8)
    print(f"{'workers':>7} {'batch':>6} {'window S x2':>11} {'window S x3':>11} "
          f"{'async S/4':>9}  (trials/s)")
    for slots in (16, 32, 64):
        row = [np.mean([batch_loop(slots, seed=s) for s in seeds]),
               np.mean([simulate(slots, slots, 2, seed=s) for s in seeds]),
               np.mean([simulate(slots, slots, 3, seed=s) for s in seeds]),
               np.mean([simulate(slots, slots // 4, 6, seed=s, mode="async") for s in seeds])]
        print(f"{slots:7d} " + " ".join(f"{v:{w}.2f}" for v, w in zip(row, (6, 11, 11, 9))))
