"""Up-front guards on memory and time: a request too big for this machine is refused before it
starts, with one line that says why and how to go on.

Commands whose memory or time grows with an option (`simulate --requests`, `trace synth
--requests × --length`, a sweep grid's cells, `optimize-tree --budget`) estimate what the request
needs from the sizes of the data structures it builds, and `check_memory` / `check_time` refuse
it with an `InputError` above the limit. The estimates are estimates (the refusal says so): each
is derived from what its code allocates per item and checked against a measured run. Files
read in a stream (`trace import`'s metrics and logs) hold bounded memory whatever their size, and
`check_read` refuses one whose reading at its reader's measured rate would pass the time limit.

Limits: memory defaults to `MEMORY_FRACTION` of this machine's available memory (MemAvailable
in /proc/meminfo, else the free physical pages); time to `DEFAULT_TIME_LIMIT_MIN` minutes. The
environment variables `SPECSCOPE_MEMORY_LIMIT_GB` and `SPECSCOPE_TIME_LIMIT_MIN` raise (or
lower) them for every command.
"""

from __future__ import annotations

import os
from pathlib import Path

from specscope.errors import InputError

MEMORY_ENV = "SPECSCOPE_MEMORY_LIMIT_GB"
TIME_ENV = "SPECSCOPE_TIME_LIMIT_MIN"
MEMORY_FRACTION = 0.8
"""Default memory limit, as a fraction of the memory available when the command starts."""
DEFAULT_TIME_LIMIT_MIN = 10.0
GB = 1e9


def available_bytes() -> float:
    """Memory available to a new allocation now: MemAvailable, else free physical pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _env_number(name: str) -> float | None:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{name} must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise InputError(f"{name} must be a finite number > 0, got {text!r}")
    return value


def memory_limit() -> tuple[float, str]:
    """The memory limit (bytes) and where it comes from, for the refusal's line."""
    gb = _env_number(MEMORY_ENV)
    if gb is not None:
        return gb * GB, f"{MEMORY_ENV}={gb:g}"
    return (MEMORY_FRACTION * available_bytes(),
            f"{MEMORY_FRACTION:.0%} of this machine's available memory")


def time_limit() -> tuple[float, str]:
    """The time limit (seconds) and where it comes from."""
    minutes = _env_number(TIME_ENV)
    if minutes is not None:
        return minutes * 60, f"{TIME_ENV}={minutes:g}"
    return DEFAULT_TIME_LIMIT_MIN * 60, "the default"


def check_memory(estimate_bytes: float, what: str) -> None:
    """Refuse (`InputError`) a request whose estimated memory is over the limit; `what` names
    the options that drive its size, e.g. "--requests 10000000"."""
    limit, origin = memory_limit()
    if estimate_bytes > limit:
        raise InputError(
            f"{what} needs an estimated {estimate_bytes / GB:,.1f} GB of memory, over the limit "
            f"of {limit / GB:,.1f} GB ({origin}); make it smaller, or raise the limit with "
            f"{MEMORY_ENV}=<GB> if the machine has the memory")


def check_time(estimate_s: float, what: str, doing: str = "computing") -> None:
    """Refuse (`InputError`) a request whose estimated run time is over the limit; `doing`
    says what the time goes to ("computing", "serving")."""
    limit, origin = time_limit()
    if estimate_s > limit:
        raise InputError(
            f"{what} needs an estimated {_duration(estimate_s)} of {doing}, over the limit "
            f"of {_duration(limit)} ({origin}); make it smaller, or raise the limit with "
            f"{TIME_ENV}=<minutes>")


def check_read(path: Path, what: str, bytes_per_s: float) -> None:
    """Refuse (`InputError`) a file whose reading at `bytes_per_s` (its reader's measured
    rate) would run past the time limit, before reading any of it; `what` names the option
    that reads it ("--from vllm-metrics"). A file that cannot be stat'ed is left to its reader,
    which says what is wrong."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    check_time(size / bytes_per_s, f"{what} {path} ({size / GB:,.2f} GB)", "reading")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.0f} h"
