"""Reading a user's YAML file strictly: UTF-8 text, valid YAML, no key given twice.

`read_yaml(path)` returns `(text, data)` or raises one ConfigError naming the file and line: a binary or
Latin-1 file (`not UTF-8 text`), a YAML syntax error, a value YAML cannot build (`2021-02-30`), and a key
given twice in one mapping at any depth (PyYAML keeps the last silently, so a second `slo:` block would
drop the first one's targets), a file over `MAX_FILE_BYTES` (1 MiB: parsing it would take minutes), and
a document whose aliases expand to more than `MAX_NODES` nodes (an alias bomb: nine levels of nine
aliases is 387 million nodes from 100 lines). Every walk visits each
node once, however often it is aliased. `line_index(text)` maps key paths to lines for validation errors,
at its first lookup (a file that validates never needs it); `read_yaml` gives the file's index built from
the nodes it parsed, so a file's YAML is parsed once however many checks ask for a line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from llmload.errors import ConfigError

__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "LineIndex", "line_index", "read_yaml"]

#: the most nodes a document may hold once its aliases are expanded (a 10,000-step ladder is ~60,000)
MAX_NODES = 1_000_000
#: the largest file read (a 10,000-step ladder is ~350 kB; long lists belong in files: datasets, traces)
MAX_FILE_BYTES = 1024 * 1024

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _format_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _check_duplicates(node: yaml.Node, *, file: str, path: tuple = (), seen_nodes: set[int] | None = None,
                      merges: list[tuple] | None = None) -> None:
    """ConfigError at the second occurrence of a key in any mapping (merge keys `<<` excepted: their paths
    are added to `merges`), and at a key or value that is not valid Unicode (`"\\ud800"`: a lone
    surrogate, which YAML's escapes allow and no server can be sent as UTF-8).

    An aliased node is checked once, at its first path."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if merges is not None:
                    merges.append(path)
                continue
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
            line = key_node.start_mark.line + 1
            _check_text(key_node, file=file, path=path)
            if key in seen:
                raise ConfigError(f"key given twice (first at line {seen[key]}); remove one",
                                  file=file, line=line, key=_format_path(path + (key,)))
            seen[key] = line
            _check_duplicates(value_node, file=file, path=path + (key,), seen_nodes=seen_nodes, merges=merges)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(item, file=file, path=path + (i,), seen_nodes=seen_nodes, merges=merges)
    else:
        _check_text(node, file=file, path=path)


def _check_text(node: yaml.Node, *, file: str, path: tuple) -> None:
    """ConfigError when a scalar's text cannot be encoded as UTF-8 (a lone surrogate)."""
    if not isinstance(node, yaml.ScalarNode) or not isinstance(node.value, str):
        return
    try:
        node.value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"not valid UTF-8: a lone surrogate \\u{ord(node.value[exc.start]):04x} (a YAML "
                          "escape no server can be sent)", file=file, line=node.start_mark.line + 1,
                          key=_format_path(path) or None) from None


def expanded_size(node: yaml.Node, sizes: dict[int, int] | None = None) -> int:
    """How many nodes `node` stands for once every alias is expanded (each node counted once per use),
    computed in one pass over the distinct nodes."""
    sizes = {} if sizes is None else sizes
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a recursive alias (&a [*a]) counts once rather than forever
    total = 1
    if isinstance(node, yaml.MappingNode):
        total += sum(expanded_size(k, sizes) + expanded_size(v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        total += sum(expanded_size(item, sizes) for item in node.value)
    sizes[id(node)] = total
    return total


def _decode(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
                          file=file, line=line) from None


def _line_of(exc: yaml.YAMLError, text: str) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return mark.line + 1
    position = getattr(exc, "position", None)  # ReaderError: a character YAML does not allow
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else None


def parse_yaml(text: str, *, file: str) -> Any:
    """The data of one YAML document in `text` (see the module docstring for what is refused)."""
    return _parse(text, file=file)[0]


def _parse(text: str, *, file: str) -> tuple[Any, Any]:
    """`parse_yaml`'s data and the document's root node as the text has it (None for an empty document,
    `LineIndex._NOT_PARSED` for one whose nodes building its data changed)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # checks for characters YAML does not allow (ReaderError)
        node = loader.get_single_node()
        if node is None:
            return None, None
        merges: list[tuple] = []
        _check_duplicates(node, file=file, merges=merges)
        if expanded_size(node) > MAX_NODES:
            raise ConfigError(f"the YAML expands to more than {MAX_NODES:,} values, counting each use of an "
                              "alias; make it smaller", file=file, line=1)
        # building the data rewrites a mapping with merge keys in place (PyYAML's `flatten_mapping`): its
        # nodes then no longer say where the text put each key
        return loader.construct_document(node), (LineIndex._NOT_PARSED if merges else node)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "not valid YAML"
        raise ConfigError(f"invalid YAML: {problem}", file=file, line=_line_of(exc, text)) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a timestamp like 2021-02-30
        raise ConfigError(f"invalid YAML value: {exc}", file=file) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | Path) -> tuple[str, Any, LineIndex]:
    """`(text, data, lines)` of a YAML file (`lines`: its `LineIndex`, from the nodes parsed here);
    ConfigError (file:line) for anything but readable UTF-8 YAML."""
    p, file = Path(path), str(path)
    if not p.exists():
        raise ConfigError("file not found", file=file)
    if p.is_dir():
        raise ConfigError("is a directory, expected a YAML file", file=file)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"the file is {size / 2**20:.1f} MiB; a YAML file may be at most "
                              f"{MAX_FILE_BYTES // 2**20} MiB (long lists belong in a dataset or trace file)",
                              file=file)
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=file) from None
    text = _decode(raw, file)
    data, root = _parse(text, file=file)
    return text, data, LineIndex(text, root=root)


class LineIndex(Mapping[tuple, int]):
    """Each key path (a tuple of keys / list indexes) of a YAML text to its 1-based line, worked out at the
    first lookup: from the document's root node when the caller parsed it already, else by parsing the
    text (empty when it is not YAML). A config that validates looks up no line, and one that does not
    looks up a few; parsing the text again cost as much as reading it (seconds for a 10,000-step ladder)."""

    _NOT_PARSED: Any = object()

    def __init__(self, text: str, *, root: Any = _NOT_PARSED) -> None:
        self._text, self._root = text, root
        self._index: dict[tuple, int] | None = None

    def _lines(self) -> dict[tuple, int]:
        if self._index is None:
            root = self._root
            if root is LineIndex._NOT_PARSED:
                try:
                    root = yaml.compose(self._text, Loader=yaml.SafeLoader)
                except (yaml.YAMLError, RecursionError):
                    root = None
            self._index, self._root = _index_of(root), None
        return self._index

    def __getitem__(self, path: tuple) -> int:
        return self._lines()[path]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._lines())

    def __len__(self) -> int:
        return len(self._lines())


def line_index(text: str) -> LineIndex:
    """Map each key path (a tuple of keys / list indexes) to its 1-based line in the YAML text (parsed at
    the first lookup)."""
    return LineIndex(text)


def _index_of(root: yaml.Node | None) -> dict[tuple, int]:
    index: dict[tuple, int] = {}
    visited: set[int] = set()

    def walk(node: yaml.Node, path: tuple) -> None:
        index[path] = node.start_mark.line + 1
        if id(node) in visited:  # an aliased node: its insides are indexed at their first path
            return
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
                key = path + (name,)
                walk(value_node, key)
                index[key] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    if root is not None:
        walk(root, ())
    return index
