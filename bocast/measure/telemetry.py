"""The GPU's state beside each figure: the SM clock, board power and temperature that the GPU
worker reads (NVML) after every timed kernel and reference, their medians per batch, and the
batches timed at a clock well below the run's (issue 40: the same H200 ran at 1980 MHz idle and
1530 MHz busy, and a ratio across the two is noise)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: what a reading carries, where the runner has NVML (record fields of the same names)
TELEMETRY = ("sm_clock_mhz", "power_w", "temperature_c")
#: a batch whose median SM clock is below this share of the run's median is flagged
LOW_CLOCK = 0.9


def batch_telemetry(records: Sequence[Any]) -> dict[str, float]:
    """Median SM clock, power and temperature over the ``records`` that carry them."""
    out = {}
    for k in TELEMETRY:
        values = [getattr(r, k) for r in records if getattr(r, k, None) is not None]
        if values:
            out[k] = float(statistics.median(values))
    return out


def clock_summary(batches: Sequence[Mapping[str, Any]], *,
                  low: float = LOW_CLOCK) -> dict[str, Any] | None:
    """The run's clocks from its batches (:meth:`bocast.records.store.Store.batches`): the median SM
    clock over batches, its range, and the batches (1-based, in order) whose clock fell below
    ``low`` of that median, each with its clock. None when no batch carries a clock."""
    clocked = [(i + 1, float(b["sm_clock_mhz"])) for i, b in enumerate(batches)
               if b.get("sm_clock_mhz")]
    if not clocked:
        return None
    median = statistics.median(c for _, c in clocked)
    flagged = [{"batch": i, "sm_clock_mhz": c, "of_median": c / median}
               for i, c in clocked if c < low * median]
    return {"batches": len(batches), "with_clock": len(clocked), "median_sm_clock_mhz": median,
            "min_sm_clock_mhz": min(c for _, c in clocked),
            "max_sm_clock_mhz": max(c for _, c in clocked), "low_share": low,
            "flagged": flagged}


def flag_line(clocks: Mapping[str, Any] | None) -> str | None:
    """One line on the flagged batches (None if none)."""
    if not clocks or not clocks["flagged"]:
        return None
    which = ", ".join(f"{f['batch']} ({f['sm_clock_mhz']:.0f} MHz)" for f in clocks["flagged"])
    return (f"clock: {len(clocks['flagged'])} of {clocks['with_clock']} batches ran below "
            f"{clocks['low_share']:.0%} of the run's median SM clock "
            f"({clocks['median_sm_clock_mhz']:.0f} MHz): batch {which}; their in-run figures "
            "are slow by that much (the final re-timing is not)")
