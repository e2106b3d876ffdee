"""Records, as users and operators' code import them: this module gathers the names of
:mod:`bocast.records.record` (a record's fields and checks), :mod:`bocast.records.store` (the
append-only store and its DataFrame), :mod:`bocast.records.datasets` (datasets written from a store)
and :mod:`bocast.records.provenance`: they were one module, and ``from bocast.records.public import
Store, load_dataset`` is how scripts and users' code reach them. Code inside bocast imports from the
module that defines a name, but for bocast.strategies.bo and bocast.strategies (not changed yet) and
a function-local import of names from two of them, which stays one import here (the count of such
imports is capped: tests/test_layout.py)."""

from bocast.files import atomic_write
from bocast.records.datasets import (
    DATASET_COLUMNS,
    DATASET_SUFFIXES,
    dataset_configs,
    dataset_csv,
    dataset_files,
    export_dataset,
    load_dataset,
)
from bocast.records.provenance import git_sha, package_versions, provenance
from bocast.records.record import (
    FEATURES,
    MAX_TFLOPS,
    MEASURED,
    OPTIONAL,
    RUN_FIELDS,
    Column,
    Measurement,
    Record,
    RecordError,
    best_record,
    check_record,
    column_docs,
    measured_values,
    ranks_by_ratio,
    speed,
)
from bocast.records.store import SCHEMA_VERSION, Store, StoreError, frame, load

__all__ = ["DATASET_COLUMNS", "DATASET_SUFFIXES", "FEATURES", "MAX_TFLOPS", "MEASURED",
           "OPTIONAL", "RUN_FIELDS", "SCHEMA_VERSION", "Column", "Measurement", "Record",
           "RecordError", "Store", "StoreError", "atomic_write", "best_record", "check_record",
           "column_docs", "dataset_configs", "dataset_csv", "dataset_files", "export_dataset",
           "frame", "git_sha", "load", "load_dataset", "measured_values", "package_versions",
           "provenance", "ranks_by_ratio", "speed"]
