"""JSON that specscope writes: strict, so every file and stream it emits is JSON.

Python's `json` writes NaN and Infinity, which JSON has no words for; a reader in another
language (an engine reading an exported config, jq, a browser) rejects the whole document. Every
JSON specscope writes goes through `strict_json`, which refuses a non-finite number in one line
naming where it lies, before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specscope.atomic import write_text_atomic
from specscope.errors import InputError


def strict_json(payload: Any, indent: int | None = 2, **options: Any) -> str:
    """`payload` as JSON without NaN or Infinity: a non-finite number is an `InputError`
    naming where it lies ("results[2].speedup"). `options` go to `json.dumps` (separators,
    sort_keys)."""
    try:
        return json.dumps(payload, indent=indent, allow_nan=False, **options)
    except ValueError:
        where = _non_finite(payload, "") or "document"
        raise InputError(f"the output's {where} is not a finite number; nothing was written "
                         "(an input made it so: check the values the command was given)") from None


def write_json(path: str | Path, payload: Any, indent: int | None = 2) -> Path:
    """Write `payload` to `path` as strict JSON (newline-terminated), atomically."""
    return write_text_atomic(path, strict_json(payload, indent) + "\n")


def _non_finite(value: Any, where: str) -> str | None:
    """The path of the first non-finite float in `value` (None: none)."""
    if isinstance(value, float):
        return where if value != value or value in (float("inf"), float("-inf")) else None
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list | tuple) else ())
    for key, item in items:
        found = _non_finite(item, f"{where}[{key}]" if isinstance(key, int)
                            else f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None
