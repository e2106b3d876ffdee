"""bocast: Bayesian-optimisation tuning of Tensor Core schedules.

The Python API (:mod:`bocast.api`): :func:`tune` runs a tune configuration as ``bocast tune``
does, :func:`load` reads a record store into a DataFrame, :func:`create_study` gives ask/tell
for a measurement loop of one's own; :func:`export` writes a record's kernel to a folder and
:func:`load_kernel` loads it to call on torch tensors (:mod:`bocast.kernel`)."""

from bocast.api import Study, TuneResult, create_study, load, tune
from bocast.errors import InputError
from bocast.kernel import Kernel, export, load_kernel

__version__ = "0.1.0"
__all__ = ["InputError", "Kernel", "Study", "TuneResult", "create_study", "export", "load",
           "load_kernel", "tune"]
