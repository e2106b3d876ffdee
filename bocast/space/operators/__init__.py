"""Operator spaces: one file per operator; each registers an ``Operator`` subclass."""
