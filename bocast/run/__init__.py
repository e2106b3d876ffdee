"""A run of the loop: its configuration (:mod:`bocast.run.config`), the loop itself
(:mod:`bocast.run.tuner`: ask the strategy, measure, record, tell), a tune run, an
ask/tell study, a run's identity and warm start, comparisons of strategies, and the
workloads of a run of many."""
