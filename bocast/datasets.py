"""Datasets: a store's measurements as a compact table (``<prefix>.csv.xz``: knob columns,
status, timings, features) and its description (``<prefix>.json``: workload, provenance,
references, what each column holds), written from a store and read back; replay, the records
library and warm starts read them."""

from __future__ import annotations

import json
import lzma
import os
from collections.abc import Iterable, Mapping
from typing import Any

from bocast.files import atomic_write
from bocast.knobs import Split
from bocast.record import FEATURES, MEASURED, column_docs
from bocast.store import _COLUMNS, load

#: a dataset's columns after the knob columns (the store's, less the provenance ones)
DATASET_COLUMNS = ("status", *MEASURED, *FEATURES, "stage")
# a dataset's rows file: xz (a quarter smaller than gzip: the datasets travel with the repo to
# the GPU machine, under a size limit); a .csv.gz of an older dataset is still read
DATASET_SUFFIXES = (".csv.xz", ".csv.gz")


def dataset_csv(prefix: str) -> str:
    """The rows file of dataset ``prefix`` that exists (the .csv.xz name if none does)."""
    for suffix in DATASET_SUFFIXES:
        if os.path.exists(prefix + suffix):
            return prefix + suffix
    return prefix + DATASET_SUFFIXES[0]


def dataset_files(prefix: str) -> list[str]:
    """Every file that is, or would be, part of dataset ``prefix`` (its .json and each rows
    file name read): what a command must not write over when it reads the dataset, nor
    replace without being told to when it writes one."""
    return [prefix + ".json", *(prefix + suffix for suffix in DATASET_SUFFIXES)]


def export_dataset(store_path: str, out_prefix: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """Write ``<prefix>.csv.xz`` (one row per measurement: knob columns, status, timings,
    features; errors dropped) and ``<prefix>.json`` (workload, provenance, references)."""
    df = load(store_path)
    knob_cols = [c for c in df.columns if c not in _COLUMNS]
    df = df[knob_cols + list(DATASET_COLUMNS)]
    for col in df.columns:  # integer-valued knob columns stay integers (nullable for inactive)
        if col in knob_cols and df[col].dtype.kind == "f":
            df[col] = df[col].astype("Int64")
    csv_path, meta_path = out_prefix + DATASET_SUFFIXES[0], out_prefix + ".json"
    with atomic_write(csv_path, "wb") as raw, \
            lzma.open(raw, "wt", preset=9 | lzma.PRESET_EXTREME) as f:
        df.to_csv(f, index=False, float_format="%.6g")
    with atomic_write(meta_path) as f:
        json.dump({"rows": len(df), "knob_columns": knob_cols, "columns": column_docs(), **meta},
                  f, indent=1, sort_keys=True)
    return csv_path, meta_path


def load_dataset(prefix: str):
    """(DataFrame, meta) of a dataset written by :func:`export_dataset`."""
    import pandas as pd

    with open(prefix + ".json") as f:
        meta = json.load(f)
    return pd.read_csv(dataset_csv(prefix)), meta


def dataset_configs(df, knob_columns: Iterable[str], space) -> list[dict[str, Any]]:
    """Configurations of a dataset's rows, rebuilt from its knob columns. A value that is not
    one a knob can take as read (a fraction where an integer belongs, a missing column) raises
    ValueError naming the row (1 = the first under the header) and the knob."""
    out = []
    cols = list(knob_columns)
    for i, row in enumerate(df[cols].itertuples(index=False)):
        r = dict(zip(cols, row))
        cfg: dict[str, Any] = {}
        for k in space.knobs:
            try:
                if isinstance(k, Split):
                    parts = [r[f"{k.name}_{j}"] for j in range(k.parts)]
                    cfg[k.name] = None if any(_isna(p) for p in parts) else \
                        tuple(_int(p) for p in parts)
                elif k.name not in r and k.default is not None:
                    cfg[k.name] = k.default  # a knob the space gained after the dataset
                else:
                    v = r[k.name]
                    cfg[k.name] = None if _isna(v) else (
                        _int(v) if isinstance(k.choices[0], int) else v)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"row {i + 1}: knob {k.name}: "
                                 f"{e if not isinstance(e, KeyError) else 'column missing'}") \
                    from None
        out.append(cfg)
    return out


def _int(v: Any) -> int:
    f = float(v)
    if not f.is_integer():
        raise ValueError(f"{v!r} is not an integer")
    return int(f)


def _isna(v: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
