"""`specscope trace import`: an engine's file of one format (`--from vllm-metrics`,
`sglang-log` or `json`) as the acceptance document `--acceptance FILE.json` reads.

Metrics and logs are read a line at a time (bounded memory, `vllm_metrics.py`,
`sglang_log.py`), and a file whose reading would pass the time limit is refused before it is
read (`limits.check_read`); a counts JSON past `MAX_JSON_BYTES` is refused unread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_json, text_lines
from specscope.interop.counters import imported, parse_counts_json
from specscope.interop.families import TopK
from specscope.interop.sglang_log import accept_length, parse_sglang_log
from specscope.interop.vllm_metrics import parse_vllm_metrics
from specscope.limits import check_read
from specscope.trace.acceptance import AcceptanceModel

MAX_JSON_BYTES = 1 << 20
"""A counts JSON larger than this (1 MiB) is refused unread: it holds a few numbers."""
READ_BYTES_PER_S = 20e6
"""A conservative rate at which metrics and logs are read, for `limits.check_read`'s estimate
(`benchmarks/imports.py` measures 36-75 MB/s on a 2-core VM)."""


def import_file(path: Path, origin: str, model: str | None = None,
                lower: AcceptanceModel | None = None, setting: TopK | None = None
                ) -> dict[str, Any]:
    """`trace import`: the acceptance document of an engine's file of format `origin`
    (`setting`: the SGLang run's steps, top-k and draft tokens, for `sglang-log`). Metrics and
    logs are read a line at a time (bounded memory), refused before reading when reading them
    would pass the time limit (`limits.check_read`); a counts JSON past `MAX_JSON_BYTES` is
    refused unread."""
    if origin == "json":
        try:
            size = path.stat().st_size
        except OSError:
            size = 0  # read_json says what is wrong
        if size > MAX_JSON_BYTES:
            raise InputError(f"{path}: {size:,} bytes, over the {MAX_JSON_BYTES:,} a counts "
                             "JSON of a few numbers needs")
        counts = parse_counts_json(read_json(path, "counts file"), str(path))
    elif origin == "vllm-metrics":
        check_read(path, "--from vllm-metrics", READ_BYTES_PER_S)
        counts = parse_vllm_metrics(text_lines(path, "metrics file"), str(path), model)
    elif origin == "sglang-log":
        if setting is None:
            raise InputError("--from sglang-log needs --steps, --topk and --draft-tokens (the "
                             "run's --speculative-num-steps, -eagle-topk, -num-draft-tokens)")
        check_read(path, "--from sglang-log", READ_BYTES_PER_S)
        return accept_length(parse_sglang_log(text_lines(path, "log file"), str(path)),
                             setting, lower) | {"file": str(path)}
    else:
        raise InputError(f"--from {origin}: not one of vllm-metrics, sglang-log, json")
    return imported(counts, origin, lower) | {"file": str(path)}
