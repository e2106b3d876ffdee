"""bocast: Bayesian-optimisation tuning of Tensor Core schedules."""

__version__ = "0.1.0"
