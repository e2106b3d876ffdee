"""BO's pieces: the surrogate GP, the acquisition functions, the feasibility model and the
warm-start sources with their source model (used by :mod:`bocast.strategies.bo.strategy`)."""
