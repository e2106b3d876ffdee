"""The progress line: its ETA comes from the rate after the first step, whose one-time costs
(imports, the reference's timing) made early estimates far off."""

import io

from bocast import progress
from bocast.progress import Progress


def test_eta_leaves_out_the_first_steps_start_up(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    p = Progress("tune", 100, stream=io.StringIO(), tty=False)
    now[0] = 60.0  # the first batch of 16: 50 s of start-up, then 10 s of work
    p.update(16)
    assert "ETA" not in p.text()  # one point gives no rate
    now[0] = 70.0  # the next batch: 10 s per 16 trials
    p.update(32)
    assert "ETA 0:42" in p.text()  # 68 left at 10 s per 16 trials, not 68 x 70 / 32 = 2:29
