"""A GGUF metadata (key/value) reader that needs only the file's header.

It reads the first part of a split GGUF, or a truncated file, where a full reader that maps the tensor
data would fail. Arrays that are not asked for are skipped.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("unexpected end of file in the GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "<Q")).decode("utf-8")


def _value(f: BinaryIO, kind: int, keep: bool) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item_kind, count = _read(f, "<I"), _read(f, "<Q")
        if not keep and item_kind in _SCALARS:
            f.seek(count * struct.calcsize(_SCALARS[item_kind]), 1)
            return count
        items = [_value(f, item_kind, keep) for _ in range(count)]
        return items if keep else count
    raise ValueError(f"unknown GGUF value type {kind}")


def read_gguf_metadata(path: str | Path, arrays: tuple[str, ...] = ()) -> dict[str, Any]:
    """All key/value pairs; arrays not named in ``arrays`` are replaced by their length."""
    with Path(path).open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (bad magic)")
        version = _read(f, "<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        _read(f, "<Q")  # tensor count
        kv_count = _read(f, "<Q")
        out: dict[str, Any] = {}
        for _ in range(kv_count):
            key = _string(f)
            out[key] = _value(f, _read(f, "<I"), keep=key in arrays)
        return out
