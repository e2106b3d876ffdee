"""bocast's extension example (docs/extending.md): a runner of one's own. It times nothing: a
kernel's latency is the operator's compute bound at a 989 TFLOPS peak, stretched by the tail wave
of its launch on 132 SMs (read off the built kernel's grid): a stand-in for a cost model, which
is what a runner of this kind is for. Its class declares what it is: it needs no GPU, its
kernels are lowered (grid, registers) without nvcc (``compiles = False``), and its timings are
modelled, so its stores stay out of the records library (``synthetic = True``).

Three ways to use it: as an object passed to ``bocast.tune`` (below), by class
(``bocast tune gemm --runner wave_model_runner:WaveModelRunner`` with this folder on the path)
and, once this package is installed, by its entry point's name (``--runner wave-model``).

    python wave_model_runner.py     # prints the best configuration of GEMM 256^3 by the model
"""

import math
import tempfile

import bocast
from bocast.measure.runner import Runner, RunResult
from bocast.records.status import Status


class WaveModelRunner(Runner):
    name = "wave-model"
    needs_gpu, compiles, synthetic = False, False, True

    def __init__(self, **options):
        # made by name (--runner), it is given what a live kind takes: timeout_s, repeats, seed
        # and l2 (docs/extending.md); a model has no use for them
        self.options = options

    def run(self, op, builds, *, on_result=None):
        results = []
        for i, b in enumerate(builds):
            ctas = b.grid[0] * b.grid[1] * b.grid[2]
            ms = op.flops / 989e12 * 1e3 * math.ceil(ctas / 132) / (ctas / 132)
            r = RunResult(key=b.key, status=Status.OK, latency_ms=ms, latency_min_ms=ms,
                          latency_q25_ms=ms, latency_q75_ms=ms, latency_max_ms=ms, repeats=1,
                          tflops=op.flops / ms / 1e9, rel_error=0.0, run_s=0.0)
            results.append(r)
            if on_result:  # the engine records each result as it is known
                on_result(i, r)
        return results


if __name__ == "__main__":  # bocast's build workers are spawned processes: they import this file
    with tempfile.TemporaryDirectory() as out:
        result = bocast.tune(op="gemm", shape=(256, 256, 256), runner=WaveModelRunner(),
                             trials=8, warm_start="none", output=out)
    assert result.trials == 8 and result.best_tflops > 0, result
    print(f"wave-model runner: {result.trials} trials, best {result.best_tflops:.1f} "
          f"(modelled) TFLOPS: {result.best_config}")
