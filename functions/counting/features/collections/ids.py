"""Counter ids from values: one documented, stable escaping (`escape`, `unescape`)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

# Characters a value keeps in a counter id; every other UTF-8 byte becomes `.HH`.
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


ESCAPE = "."


# A value too long for its id keeps an escaped head and ends in `..` and 32 hex digits of its
# SHA-256: `..` never appears in an escaped value (an escape is `.` and two hex digits).
HASH_MARK = ".."


HASH_HEX = 32


def escape(value: str, room: int) -> str:
    """The id form of `value` in at most `room` characters: A-Z a-z 0-9 _ - stay, every other
    UTF-8 byte is `.` and two upper-case hex digits; too long, the escaped head that fits and
    `..` + the first 32 hex digits of SHA-256(value). Stable, and one-to-one (up to SHA-256)."""
    escaped = "".join(
        char if char in _KEPT else "".join(f"{ESCAPE}{byte:02X}" for byte in char.encode())
        for char in value
    )
    if len(escaped) <= room:
        return escaped
    digest = hashlib.sha256(value.encode()).hexdigest()[:HASH_HEX]
    head = escaped[:room - len(HASH_MARK) - HASH_HEX]
    cut = head.rfind(ESCAPE)
    if cut >= len(head) - 2:  # do not leave half an escape
        head = head[:cut]
    return f"{head}{HASH_MARK}{digest}"


def unescape(escaped: str) -> str:
    """The value of an escaped id part (not of a hashed one: that lost its tail)."""
    if HASH_MARK in escaped:
        raise ValueError(f"{escaped!r} is hashed: its value is not recoverable")
    out = bytearray()
    i = 0
    while i < len(escaped):
        if escaped[i] == ESCAPE:
            out.append(int(escaped[i + 1:i + 3], 16))
            i += 3
        else:
            out.extend(escaped[i].encode())
            i += 1
    return out.decode()
