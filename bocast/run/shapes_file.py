"""A shapes file: the workloads of a run of many (``bocast tune --shapes FILE``,
:func:`bocast.tune_many`), one per CSV line or YAML entry, as :func:`bocast.shapes_of` (``bocast
shapes``) writes them for a torch model.

- **CSV** (``.csv``): a header line naming the columns, then one workload a line; ``#`` starts a
  comment line. Columns: ``op`` and ``shape`` (extents separated by ``x``, or by commas inside
  quotes), and optionally ``dtype``, ``layout``, ``fuse`` (a GEMM's fused epilogue: ``bias``,
  ``bias+gelu``, ...; an nn.Linear with a bias is ``bias``), ``count`` (how many times one
  forward pass runs it) and ``name`` (what it is in the model)::

      op,shape,dtype,fuse,count,name
      gemm,128x4096x4096,fp16:fp32,,64,q_proj o_proj
      gemm,128x14336x4096,bf16:bf16,bias,32,mlp.*.up

- **YAML** (``.yaml``, ``.yml``): a list of mappings with the same keys (``shape`` a list of
  integers or the text above)::

      - {op: gemm, shape: [128, 4096, 4096], dtype: "fp16:fp32", count: 64}

An entry without ``dtype``, ``layout`` or ``fuse`` takes the command's (``--dtype``, ``--fuse``),
else the operator's default. A command's ``--layout`` or ``--fuse`` is every entry's: a list with
an operator that takes none (a convolution) is refused before anything runs, naming the entry
(:func:`command_options`); a list of GEMMs and convolutions fuses GEMMs by its ``fuse`` column.
Bad input is one :class:`ShapesError` naming the file and the line.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bocast.errors import InputError
from bocast.files import atomic_write

#: the columns (CSV) and keys (YAML) of an entry, in the order written
COLUMNS = ("op", "shape", "dtype", "layout", "fuse", "count", "name")
#: the workload options an entry may set, over the command's (the others are what it says of
#: the model)
OPTIONS = ("dtype", "layout", "fuse")
#: a shapes file is read only up to this size (a model's de-duplicated shapes are a few dozen)
MAX_BYTES = 256 * 1024


class ShapesError(InputError):
    """A shapes file (or a list of shapes) that cannot be read; the message names the place."""


@dataclass(frozen=True)
class Shape:
    """One workload of a shapes file: an operator's shape, with its dtype, layout and fused
    epilogue where given, and what the model says of it (``count``, ``name``). ``line``: where
    it was read (None: given in code)."""

    op: str
    shape: tuple[int, ...]
    dtype: str | None = None
    layout: str | None = None
    count: int | None = None
    name: str | None = None
    line: int | None = None
    fuse: str | None = None  # last: the fields before it keep their positions

    def options(self) -> dict[str, str]:
        """The workload options this entry sets (:data:`OPTIONS` it gives)."""
        return {k: getattr(self, k) for k in OPTIONS if getattr(self, k)}

    def workload(self) -> dict[str, Any]:
        """The configuration's ``workload`` fields this entry sets."""
        return {"op": self.op, "shape": list(self.shape), **self.options()}

    @property
    def text(self) -> str:
        """``gemm 128x4096x4096 fp16:fp32 NT bias``: the entry in a line (dtype, layout, fuse
        if given)."""
        return " ".join([self.op, "x".join(map(str, self.shape)), *self.options().values()])

    def row(self) -> dict[str, Any]:
        return {"op": self.op, "shape": "x".join(map(str, self.shape)), "dtype": self.dtype,
                "layout": self.layout, "fuse": self.fuse, "count": self.count, "name": self.name}


def command_options(listed: Sequence[tuple[Shape, str]], options: Mapping[str, Any]) -> None:
    """A command's workload options (``--layout``, ``--fuse``) apply to every entry: one
    ShapesError, before anything runs, naming the first entry whose operator takes none of one
    given (a convolution has no layout and no fused epilogue). ``listed``: each entry with where
    it was given."""
    for key in OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        for e, where in listed:
            if key not in _option_names(e.op) and key not in e.options():
                takes = [o for o in sorted({x.op for x, _ in listed})
                         if key in _option_names(o)]
                if not takes:
                    raise ShapesError(f"--{key} {value}: {e.op} takes no {key} ({where})")
                raise ShapesError(
                    f"--{key} {value}: {where} is {e.op}, which takes no {key}; a command's "
                    f"--{key} is every workload's, so with {e.op} in the list give it per "
                    f"workload instead: the shapes file's {key} column, on the "
                    f"{' and '.join(takes)} lines")


def _option_names(op: str) -> tuple[str, ...]:
    """The workload options operator ``op`` takes (its ``option_names``)."""
    from bocast.space.operators.operator import get_operator

    return tuple(getattr(get_operator(op), "option_names", ()))


def entry(raw: Mapping[str, Any], where: str) -> Shape:
    """One entry (a YAML mapping, a CSV row, a mapping given in code) checked: ``op`` and
    ``shape`` present, the other keys known and of their types; ShapesError names ``where``.
    Whether the operator takes the shape is the run's check (it names ``where`` too)."""
    from bocast.space.operators.operator import get_operator, parse_shape

    if not isinstance(raw, Mapping):
        raise ShapesError(f"{where}: expected a mapping with op and shape, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in COLUMNS)
    if unknown:
        raise ShapesError(f"{where}: unknown key(s) {unknown}; known: {', '.join(COLUMNS)}")
    given = {k: v for k, v in raw.items() if v not in (None, "")}
    for key in ("op", "shape"):
        if key not in given:
            raise ShapesError(f"{where}: {key} missing")
    try:
        get_operator(str(given["op"]))
        shape = given["shape"]
        if isinstance(shape, str):
            dims = parse_shape(shape)
        elif isinstance(shape, Sequence) and all(type(x) is int for x in shape):
            dims = tuple(shape)
        else:
            raise ShapesError(f"shape {shape!r}: expected integers (a list, or 128x4096x4096)")
    except InputError as e:
        raise ShapesError(f"{where}: {e}") from None
    for key in ("dtype", "layout", "fuse", "name"):
        if key in given and not isinstance(given[key], str):
            raise ShapesError(f"{where}: {key}: expected text, got {given[key]!r}")
    for key in ("layout", "fuse"):
        if key in given and key not in _option_names(str(given["op"])):
            raise ShapesError(f"{where}: {key} {given[key]!r}: {given['op']} takes no {key}")
    count = given.get("count")
    if count is not None:
        try:
            count = int(count) if not isinstance(count, bool) else None
        except (TypeError, ValueError):
            count = None
        if count is None or count < 1:
            raise ShapesError(f"{where}: count: expected a positive integer, got "
                              f"{given['count']!r}")
    line = int(where.rsplit(" ", 1)[-1]) if " line " in where else None
    return Shape(str(given["op"]), dims, given.get("dtype"), given.get("layout"), count,
                 given.get("name"), line, given.get("fuse"))


def read(path: str) -> list[Shape]:
    """The entries of the shapes file at ``path`` (CSV or YAML by its extension), in order;
    ShapesError names the file and the bad line."""
    kind = _kind(path)
    try:
        if not os.path.isfile(path):
            raise ShapesError(f"{path}: no such file" if not os.path.exists(path)
                              else f"{path}: not a file")
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise ShapesError(f"{path}: cannot be read ({e})") from None
    if len(text) > MAX_BYTES:
        raise ShapesError(f"{path}: more than the {MAX_BYTES:,} bytes a shapes file may have")
    entries = _read_csv(text, path) if kind == "csv" else _read_yaml(text, path)
    if not entries:
        raise ShapesError(f"{path}: no shapes listed")
    return entries


def _kind(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".csv":
        return "csv"
    if ext in (".yaml", ".yml"):
        return "yaml"
    raise ShapesError(f"{path}: a shapes file is .csv or .yaml/.yml, got {ext or 'no extension'}")


def _read_csv(text: str, path: str) -> list[Shape]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return []
    head_line, head = lines[0]
    columns = [c.strip() for c in next(csv.reader([head]))]
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown or "op" not in columns or "shape" not in columns or len(set(columns)) < len(columns):
        raise ShapesError(f"{path} line {head_line}: expected a header of the columns "
                          f"{', '.join(COLUMNS)} (op and shape required, each once), got {head!r}")
    out = []
    for n, line in lines[1:]:
        cells = next(csv.reader([line]))
        if len(cells) > len(columns):
            raise ShapesError(f"{path} line {n}: {len(cells)} values, the header names "
                              f"{len(columns)} columns")
        out.append(entry({c: v.strip() for c, v in zip(columns, cells)}, f"{path} line {n}"))
    return out


def _read_yaml(text: str, path: str) -> list[Shape]:
    import yaml

    from bocast.config_files import parse_yaml

    try:
        data = parse_yaml(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # where each entry starts
    except yaml.YAMLError as e:
        raise ShapesError(f"{path}: not valid YAML ({' '.join(str(e).split())[:300]})") from None
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise ShapesError(f"{path}: expected a list of entries (- {{op: gemm, shape: "
                          "[128, 4096, 4096]}), one per workload")
    return [entry(raw, f"{path} line {n.start_mark.line + 1}")
            for raw, n in zip(data, node.value)]


def write(path: str, entries: Sequence[Shape]) -> None:
    """Write ``entries`` as a shapes file (CSV or YAML by the extension of ``path``),
    columns that no entry gives left out."""
    kind = _kind(path)
    rows = [e.row() for e in entries]
    columns = [c for c in COLUMNS if c in ("op", "shape") or any(r[c] is not None for r in rows)]
    if kind == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([["" if r[c] is None else r[c] for c in columns] for r in rows])
        text = buf.getvalue()
    else:
        # one flow mapping a line, JSON-quoted (JSON is YAML): a dtype's colon stays a string
        text = "".join("- {" + ", ".join(
            f"{c}: {json.dumps(r[c] if c != 'shape' else [int(x) for x in r[c].split('x')])}"
            for c in columns if r[c] is not None) + "}\n" for r in rows)
    with atomic_write(path) as f:
        f.write(text)
