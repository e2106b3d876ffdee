"""Reading a configuration file or a ``--set`` value as YAML, under limits (size, depth,
items with aliases expanded, unique keys), with one error naming the file and the place:
every configuration reader goes through :func:`read_yaml` or :func:`parse_yaml`."""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml

from bocast.errors import InputError
from bocast.schema import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_ITEMS", "UnreadableFile", "YamlLimitError",
           "in_file", "parse_yaml", "read_yaml"]


class UnreadableFile(ConfigError):
    """A configuration file that cannot be read as YAML; the message names the file."""


#: Limits on a configuration file (a YAML bomb is a few lines whose aliases expand to a billion
#: items; a 100 MB file takes minutes to parse): refused before it is read, or as it is composed,
#: never after. The largest shipped configuration is under 10 KB, 4 levels deep, 2,000 items.
MAX_CONFIG_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_ITEMS = 50_000  # scalars, lists and mappings, counted with every alias expanded


class YamlLimitError(yaml.composer.ComposerError):
    """A document past :data:`MAX_DEPTH` or :data:`MAX_ITEMS`."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    one without a word, so ``budget:`` written twice would run the budget a reader of the file
    does not see first (YAML 1.2 says keys are unique); and a document nested deeper than
    :data:`MAX_DEPTH` (PyYAML recurses: 900 levels end in RecursionError) or of more than
    :data:`MAX_ITEMS` items once its aliases are expanded (what every reader of the data would
    walk: the configuration's checks, its identity's JSON), refused before it is constructed."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlLimitError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_items(node)
        return node

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor": its keys may repeat
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: construct_mapping reports it
                continue
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first at line {first.line + 1})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _expanded_items(root: yaml.Node) -> int:
    """The items of the document ``root`` with every alias expanded (an anchored node counts
    each time it is used), counted once per node: YamlLimitError past :data:`MAX_ITEMS`, or for an
    alias inside its own anchor (an endless document)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            raise YamlLimitError(None, None, "an alias inside its own anchor", node.start_mark)
        open_.add(id(node))
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(c) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        open_.discard(id(node))
        if n > MAX_ITEMS:
            raise YamlLimitError(None, None, f"more than {MAX_ITEMS:,} items once its aliases are "
                           "expanded", node.start_mark)
        sizes[id(node)] = n
        return n

    return size(root)  # depth is bounded by MAX_DEPTH: the recursion is too


def parse_yaml(text: str) -> Any:
    """YAML text given on a command line (``--set key=VALUE``), under the limits of a
    configuration file; a yaml.YAMLError when it is not YAML or passes them."""
    if len(text.encode("utf-8", "replace")) > MAX_CONFIG_BYTES:
        raise YamlLimitError(None, None, f"longer than {MAX_CONFIG_BYTES:,} bytes", None)
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only


def read_yaml(path: str) -> Any:
    """A configuration file's content (a key given twice in a mapping refused, as not valid
    YAML; so is a file past the limits above); an UnreadableFile names the file and the
    problem."""
    try:
        info = os.stat(path)
        # a FIFO or a device would block the read, or never end
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(f"{path}: not a regular file (a pipe or a device?)")
        if info.st_size > MAX_CONFIG_BYTES:
            raise UnreadableFile(f"{path}: {info.st_size:,} bytes, more than the "
                                 f"{MAX_CONFIG_BYTES:,} a configuration file may have")
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)  # a file grown since the stat
        if len(text) > MAX_CONFIG_BYTES:
            raise UnreadableFile(f"{path}: more than the {MAX_CONFIG_BYTES:,} bytes a "
                                 "configuration file may have")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except FileNotFoundError:
        raise UnreadableFile(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnreadableFile(f"{path}: is a folder, not a configuration file") from None
    except OSError as e:
        raise UnreadableFile(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UnreadableFile(f"{path}: not a text file") from None
    except yaml.YAMLError as e:
        raise UnreadableFile(f"{path}: not valid YAML ({_yaml_problem(e)})") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    """What PyYAML found and where, without the file's name (its message repeats it)."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split())
    what = " ".join(x for x in (getattr(e, "context", None), problem) if x)
    return f"line {mark.line + 1}, column {mark.column + 1}: {' '.join(what.split())}"


def in_file(e: InputError, path: str) -> InputError:
    """``e`` as an error of the configuration file ``path``: the same kind of error, its
    message led by the file's name (which an :class:`UnreadableFile` already has)."""
    if isinstance(e, UnreadableFile):
        return e
    try:
        return type(e)(f"{path}: {e}")
    except TypeError:  # an error class with another constructor
        return InputError(f"{path}: {e}")
