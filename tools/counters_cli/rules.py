"""Firestore rules as text: the extension counters' rules generated from their declarations
(`counters extension-rules`), the old shard rules the extension's guide asked for (which
`counters doctor` and `counters init` refuse), and the editing of a host's rules file by
`counters init` and `counters remove` (its block, marked)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import click
from counting.features.collections import MAX_EXTENSION_AMOUNT, SHARDS, Declaration, Extension

# How init marks the block it adds to a host's rules file.
MARK_BEGIN = "// counters:begin {name} (added by `counters init`; `counters remove` takes it out)"
MARK_END = "// counters:end {name}"


# --- The extension counters' shards ------------------------------------------------------------

RULES_BEGIN = "    // extension counters: begin (generated: `counters extension-rules`)"
RULES_END = "    // extension counters: end"
# A shard id as the extension's clients make them (a UUID); partials (a tab first) are the
# server's.
SHARD_ID = "[A-Za-z0-9-]{1,64}"


def extension_rules(declarations: Iterable[Declaration]) -> str:
    """The rules of the extension counters' shards: a signed-in user writes a shard of a declared
    document that exists (unless every declaration over it lets shards create it), changing the
    declared fields only (other fields a shard already holds, such as those the extension
    counted before, are left as they are), each a whole number changed by its declared `by` (or
    not at all); nobody deletes one, and partials are server-only. Their documents are the app's:
    its own rules say who reads (the extension's clients do) and writes them."""
    grouped: dict[str, list[Extension]] = defaultdict(list)
    for declaration in declarations:
        if declaration.extension is not None:
            grouped[declaration.documents].append(declaration.extension)
    lines = [RULES_BEGIN]
    if grouped:
        lines += [
            "    // A field of an extension counter in a client's write of its shard: a whole "
            "number (an integer,",
            "    // or a double with no fraction: the Android and iOS clients send 1.0) of at "
            f"most {MAX_EXTENSION_AMOUNT},",
            "    // as it was or changed by low..high.",
            "    function extensionField(path, low, high) {",
            "      let after = request.resource.data.get(path, 0);",
            "      let before = resource == null ? 0 : resource.data.get(path, 0);",
            "      return (after is int || (after is float && after == math.floor(after)))",
            f"        && math.abs(after) <= {MAX_EXTENSION_AMOUNT}",
            "        && (after == before || (after - before >= low && after - before <= high));",
            "    }",
            "    // The keys a client's write changes in a map of its shard (every key when it "
            "creates the",
            "    // shard): only `keys`; others the shard holds stay as they are.",
            "    function extensionKeys(after, before, keys) {",
            "      return after.diff(before).affectedKeys().hasOnly(keys);",
            "    }",
        ]
    for documents, extensions in grouped.items():
        # Each map on the way to a field changes only the declared keys below it (siblings such
        # as `stats.likes` and `stats.views` share their map's check).
        below: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for e in extensions:
            for depth in range(len(e.path)):
                below[tuple(e.path[:depth])].add(e.path[depth])
        checks = [_keys(list(prefix), sorted(keys)) for prefix, keys in sorted(below.items())]
        if not all(e.create_documents for e in extensions):
            checks.append(f"exists(/databases/$(database)/documents/{_variables(documents)})")
        checks += [f"extensionField({_list(e.path)}, {e.by[0]}, {e.by[1]})" for e in extensions]
        fields = ", ".join(f"{e.field} ({e.by[0]}..{e.by[1]})" for e in extensions)
        lines += [
            f"    // {documents}: the Distributed Counter extension's shards of {fields}.",
            f"    match /{documents}/{SHARDS}/{{extensionShard}} {{",
            "      allow read: if true;",
            "      allow create, update: if request.auth != null",
            f"        && extensionShard.matches('{SHARD_ID}')",
            *(f"        && {check}" for check in checks[:-1]),
            f"        && {checks[-1]};",
            "      allow delete: if false;",
            "    }",
        ]
    lines.append(RULES_END)
    return "\n".join(lines) + "\n"


def _keys(prefix: list[str], keys: list[str]) -> str:
    """The check of the keys a write changes in the map at `prefix` (the shard itself: [])."""
    if not prefix:
        return (f"extensionKeys(request.resource.data, resource == null ? {{}} : resource.data, "
                f"{_list(keys)})")
    return (f"extensionKeys(request.resource.data.get({_list(prefix)}, {{}}),\n"
            f"          resource == null ? {{}} : resource.data.get({_list(prefix)}, {{}}), "
            f"{_list(keys)})")


def _variables(pattern: str) -> str:
    """A documents pattern as a path in rules: `posts/{post}` -> `posts/$(post)`."""
    return re.sub(r"\{(\w+)\}", r"$(\1)", pattern)


def old_shard_rules(rules: str) -> list[str]:
    """The `match` lines of `rules`, outside the generated block, that let clients write
    `_counter_shards_`: a match over `_counter_shards_`, or a recursive wildcard (`{x=**}`,
    which covers the shards too), whose own body (not a match nested in it) allows `write`,
    `create` or `update`. The rule the extension's guide asks for lets any signed-in client put
    any amount in a shard, and a rule that allows wins over the generated ones."""
    begin, end = rules.find(RULES_BEGIN.strip()), rules.find(RULES_END.strip())
    if 0 <= begin < end:
        rules = rules[:begin] + " " * (end - begin) + rules[end:]
    code = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: " " * len(m.group()), rules, flags=re.DOTALL)
    found = []
    for match in re.finditer(r"\bmatch\s+(\S+)\s*\{", code):
        path = match.group(1)
        if SHARDS not in path and "=**}" not in path:
            continue
        depth, at, own = 1, match.end(), []
        while depth and at < len(code):
            depth += {"{": 1, "}": -1}.get(code[at], 0)
            own.append(code[at] if depth == 1 else " ")  # its own statements, not nested ones
            at += 1
        if re.search(r"\ballow\s+[^:;]*\b(write|create|update)\b", "".join(own)):
            found.append(f"line {rules.count(chr(10), 0, match.start()) + 1}: match {path}")
    return found


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


# --- A host's rules file -----------------------------------------------------------------------


def database_block(body: str) -> str:
    """`body` as the rules of the documents of the database the file is deployed to."""
    return f"  match /databases/{{database}}/documents {{\n{body}\n  }}\n"



def insert_rules(host: str, block: str, name: str) -> str:
    """The host's rules with `block` added, marked, as the last thing in its service."""
    end = last_brace(host)
    newline = "\r\n" if "\r\n" in host else "\n"
    marked = (f"  {MARK_BEGIN.format(name=name)}\n{block}  {MARK_END.format(name=name)}\n")
    head = host[:end].rstrip(" ")
    if not head.endswith("\n"):
        head += newline
    return head + marked.replace("\n", newline) + host[end:]


def remove_rules(host: str, name: str) -> str:
    pattern = re.compile(rf"^ *{re.escape(MARK_BEGIN.format(name=name))}\r?\n.*?"
                         rf"^ *{re.escape(MARK_END.format(name=name))}\r?\n",
                         re.MULTILINE | re.DOTALL)
    return pattern.sub("", host, count=1)


def last_brace(rules: str) -> int:
    """Where the service block of a rules file closes, after which only blank lines and comments
    may follow (braces in comments and strings do not count)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"",
                  lambda m: " " * len(m.group()), rules, flags=re.DOTALL)
    service = re.search(r"\bservice\s+cloud\.firestore\s*\{", code)
    depth, end = 0, -1
    for at in range(service.end() - 1 if service else len(code), len(code)):
        depth += {"{": 1, "}": -1}.get(code[at], 0)
        if depth == 0:
            end = at
            break
    if end < 0 or code[end + 1:].strip():
        raise click.ClickException("the host's rules file does not end with its `service "
                                   "cloud.firestore` block: add the backend's rules by hand "
                                   "(docs/adopt.md)")
    return end
