"""bocast: Bayesian-optimisation tuning of Tensor Core schedules.

The Python API (:mod:`bocast.api`): :func:`tune` runs a tune configuration as ``bocast tune`` does,
:func:`tune_many` many workloads in one run (``bocast tune --shapes``; :mod:`bocast.many`),
:func:`shapes_of` lists a torch model's matmul and convolution shapes
(:mod:`bocast.run.model_shapes`), :func:`suggest` ranks a new shape's configurations from the
records library with no measurement, :func:`load` reads a record store into a DataFrame,
:func:`create_study` gives ask/tell for a measurement loop of one's own (:mod:`bocast.run.study`);
:func:`export` writes a record's kernel to a folder and :func:`load_kernel` loads it to call on
torch tensors (:mod:`bocast.kernel`); :func:`report` reads finished runs' stores and reports them
per budget, as ``bocast report`` (:mod:`bocast.tools.reporting`). :class:`Workload`,
:class:`Budget`, :class:`RunnerOptions` and each strategy's options
(``bocast.strategies.BOOptions``, ...) are typed forms of a configuration's mappings
(:mod:`bocast.options`).

Importing bocast sets OpenMP's wait policy to passive where the environment does not set it
(``OMP_WAIT_POLICY``), for torch loaded after it: torch's OpenMP threads otherwise wait for work
by spinning: on a loaded 2-core machine, as a host whose cores build kernels while the pipelined
fleet loop asks BO for the next batch, an ask took 2-6x longer and 3-4x the CPU seconds (taken
from the builds) with spinning threads (medians 7.7-10.2 s against 1.6-3.5 s passive,
``lab/bench_pending.py``, ``experiments/results/bench_pending_cpu2/``). The policy changes how
an idle thread waits, never a result (the same picks in both)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before anything loads torch

from bocast.api import TuneResult, compare, load, suggest, tune
from bocast.errors import InputError
from bocast.kernel import Kernel, export, load_kernel
from bocast.many import ManyResult, tune_many
from bocast.options import Budget, RunnerOptions, Workload
from bocast.run.model_shapes import ModelShapes, shapes_of
from bocast.run.study import Study, create_study
from bocast.tools.reporting import Report, report

__version__ = "0.1.0"
__all__ = ["Budget", "InputError", "Kernel", "ManyResult", "ModelShapes", "Report",
           "RunnerOptions", "Study", "TuneResult", "Workload", "compare", "create_study", "export",
           "load", "load_kernel", "report", "shapes_of", "suggest", "tune", "tune_many"]
