"""JSON text as `counters init` writes it (`dumps`), and edits of a host's JSON text that keep
the rest as the host wrote it (`edit`): its indentation, line breaks (CRLF too), key order and
one-line objects. `counters remove` takes the install's entries out of a firebase.json the host
has reformatted since, and gives back the host's bytes minus those entries."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

LINE = 100  # the longest line dumps() writes an object on

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SCALAR = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null')
_SPACE = re.compile(r"\s*")
_INDENT = re.compile(r"[ \t]*")


def dumps(data: Any) -> str:
    """JSON as firebase.json is usually written: two-space indents, lists of plain values and
    small objects of them on one line."""
    return _dumps(data, "") + "\n"


def _dumps(data: Any, indent: str) -> str:
    inner = indent + "  "
    if isinstance(data, dict) and data and not _flat(data, indent):
        items = (f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dumps(v, inner)}"
                 for k, v in data.items())
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(data, list) and data and not all(_plain(v) for v in data):
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in data) + f"\n{indent}]"
    if isinstance(data, dict):
        return ("{ " + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_dumps(v, inner)}"
                                 for k, v in data.items()) + " }") if data else "{}"
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))


def _plain(value: Any) -> bool:
    return not isinstance(value, dict | list)


def _flat(data: dict[str, Any], indent: str) -> bool:
    """An object of plain values that fits on one line."""
    return (all(_plain(v) for v in data.values())
            and len(indent) + len(json.dumps(data, ensure_ascii=False)) + 6 <= LINE)


def in_own_format(text: str) -> bool:
    """Whether `text` is JSON exactly as `dumps` writes it (or no JSON at all)."""
    try:
        return text == dumps(json.loads(text))
    except ValueError:
        return True


@dataclass
class _Node:
    """A value in a JSON text: where it starts and ends, and its entries (key or None, where
    the entry starts, its value)."""

    start: int
    end: int
    value: Any
    entries: list[tuple[str | None, int, _Node]] = field(default_factory=list)


def _parse(text: str, at: int) -> _Node:
    at = _space(text, at)
    opener = text[at:at + 1]
    if opener not in ("{", "["):
        scalar = _SCALAR.match(text, at)
        if scalar is None:
            raise ValueError(f"no JSON value at {at}")
        return _Node(at, scalar.end(), json.loads(scalar.group()))
    closer = "}" if opener == "{" else "]"
    entries: list[tuple[str | None, int, _Node]] = []
    pos = _space(text, at + 1)
    while text[pos:pos + 1] != closer:
        begin, key = pos, None
        if opener == "{":
            name = _STRING.match(text, pos)
            if name is None:
                raise ValueError(f"no key at {pos}")
            key = json.loads(name.group())
            pos = _space(text, name.end())
            if text[pos:pos + 1] != ":":
                raise ValueError(f"no ':' at {pos}")
            pos += 1
        node = _parse(text, pos)
        entries.append((key, begin, node))
        pos = _space(text, node.end)
        if text[pos:pos + 1] == ",":
            pos = _space(text, pos + 1)
        elif text[pos:pos + 1] != closer:
            raise ValueError(f"no ',' or {closer!r} at {pos}")
    value: Any = ({key: node.value for key, _, node in entries} if opener == "{"
                  else [node.value for _, _, node in entries])
    return _Node(at, pos + 1, value, entries)


def _space(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    assert found is not None  # \s* matches anywhere
    return found.end()


def edit(text: str, new: Any) -> str:
    """`text`, a JSON document, changed to say `new`: entries `new` lacks are cut out with their
    separator, a one-entry list that became its entry is that entry's text, and only a value
    changed otherwise is written anew (as `dumps` writes it, at its line's indentation). A text
    that does not parse is written anew whole."""
    try:
        root = _parse(text, 0)
    except (ValueError, IndexError):
        return dumps(new)
    if _space(text, root.end) != len(text):
        return dumps(new)
    edits: list[tuple[int, int, str]] = []
    _diff(text, root, new, edits)
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _same(old: Any, new: Any) -> bool:
    return type(old) is type(new) and bool(old == new)


def _diff(text: str, node: _Node, new: Any, edits: list[tuple[int, int, str]]) -> None:
    old = node.value
    if _same(old, new):
        return
    if isinstance(old, dict) and isinstance(new, dict) and new.keys() <= old.keys():
        _cut(node, [i for i, (key, _, _) in enumerate(node.entries) if key not in new], edits)
        for key, _, child in node.entries:
            if key in new:
                _diff(text, child, new[key], edits)
        return
    if isinstance(old, list) and isinstance(new, list):
        if len(old) == len(new):
            for (_, _, child), value in zip(node.entries, new, strict=True):
                _diff(text, child, value, edits)
            return
        kept = _subsequence(old, new)
        if kept is not None:
            _cut(node, [i for i in range(len(old)) if i not in kept], edits)
            return
    if isinstance(old, list) and isinstance(new, dict):
        fits = [i for i, value in enumerate(old)
                if isinstance(value, dict) and new.keys() <= value.keys()]
        if fits:  # the entry most like `new` becomes the value (a list back in object form)
            best = max(fits, key=lambda i: sum(_same(old[i][k], v) for k, v in new.items()))
            edits.append((node.start, node.end, _lifted(text, node, best, new)))
            return
    edits.append((node.start, node.end, _dumps(new, _indent(text, node.start)).replace(
        "\n", "\r\n" if "\r\n" in text else "\n")))


def _subsequence(old: list[Any], new: list[Any]) -> set[int] | None:
    """The positions in `old` of the entries of `new`, in order; None unless all are there."""
    found: set[int] = set()
    at = 0
    for value in new:
        while at < len(old) and not _same(old[at], value):
            at += 1
        if at == len(old):
            return None
        found.add(at)
        at += 1
    return found


def _cut(node: _Node, gone: list[int], edits: list[tuple[int, int, str]]) -> None:
    """Cut the entries `gone` out of the object or list `node`, each with the separator that
    came before it (a leading run, with the one after it)."""
    if not gone:
        return
    kept = [i for i in range(len(node.entries)) if i not in gone]
    if not kept:
        edits.append((node.start + 1, node.end - 1, ""))
        return
    starts = [begin for _, begin, _ in node.entries]
    ends = [child.end for _, _, child in node.entries]
    if kept[0] > 0:
        edits.append((starts[0], starts[kept[0]], ""))
    edits.extend((ends[i - 1], ends[i], "") for i in gone if i > kept[0])


def _lifted(text: str, node: _Node, entry: int, new: dict[str, Any]) -> str:
    """The text of the list `node`'s `entry`, edited to say `new` and moved out to `node`'s
    place: its lines shifted left by the indentation the list added."""
    child = node.entries[entry][2]
    inner = edit(text[child.start:child.end], new)
    outer, indent = _indent(text, node.start), _indent(text, child.start)
    same_line = "\n" not in text[node.start:child.start]
    if same_line or not indent.startswith(outer):
        return inner
    lines = inner.split("\n")
    return "\n".join([lines[0], *(line[:len(outer)] + line[len(indent):]
                                  if line.startswith(indent) else line
                                  for line in lines[1:])])


def _indent(text: str, at: int) -> str:
    """The indentation of the line `at` is on."""
    found = _INDENT.match(text, text.rfind("\n", 0, at) + 1)
    assert found is not None  # [ \t]* matches anywhere
    return found.group()
