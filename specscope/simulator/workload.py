"""The workload: when requests arrive, how long their prompts and outputs are, how they fork.

Arrivals: Poisson at `rate` requests/s (exponential gaps), Gamma gaps of the same mean with a
coefficient of variation `cv` (shape 1/cv²: cv > 1 is bursty), or the first `requests` times of a
file (one number of seconds per line, non-decreasing).

Lengths: a `LengthDist` each for prompts and outputs, written `N` (fixed), `uniform:A:B`
(inclusive), `lognormal:MEDIAN:SIGMA` (rounded, at least 1), or `trace`: the prompt is the
context before the first position of the sequence's trace request, the output its positions.

Kinds: `chat`, one sequence per request; `forking` (best-of-N, reasoning-time tree search): the
prompt is prefilled once and `branches` sequences continue it; each spawns `branches` more when
it finishes, for `levels` levels (best-of-N is levels 1), every child continuing its parent's
context and sharing that prefix's KV. Each sequence draws its own output length (and replays its
own trace request).

Every random choice comes from `numpy.random.default_rng` of the run's seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specscope.errors import InputError
from specscope.files import text_lines
from specscope.simulator.entities import Group, Request

ARRIVALS = ("poisson", "gamma")
WORKLOADS = ("chat", "forking")
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "trace")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (module docstring); `a`, `b` its parameters."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, option: str) -> LengthDist:
        """`N`, `uniform:A:B`, `lognormal:MEDIAN:SIGMA` or `trace`; bad text is an InputError
        naming `option`."""
        parts = text.strip().split(":")
        try:
            if parts == ["trace"]:
                return cls("trace")
            if len(parts) == 1:
                dist = cls("fixed", float(int(parts[0])))
            elif parts[0] in ("uniform", "lognormal") and len(parts) == 3:
                dist = cls(parts[0], float(parts[1]), float(parts[2]))
            else:
                raise ValueError
        except ValueError:
            raise InputError(f"{option}: expected N, uniform:A:B, lognormal:MEDIAN:SIGMA or "
                             f"trace, got {text!r}") from None
        bad = {"fixed": dist.a < 1, "uniform": not 1 <= dist.a <= dist.b,
               "lognormal": dist.a < 1 or dist.b < 0}[dist.kind]
        if bad:
            raise InputError(f"{option}: lengths must be at least 1 token (uniform A ≤ B, "
                             f"lognormal sigma ≥ 0), got {text!r}")
        return dist

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` lengths (tokens, ≥ 1) from a non-trace distribution."""
        if self.kind == "fixed":
            return np.full(size, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size)
        return np.maximum(1, np.rint(self.a * np.exp(self.b * rng.standard_normal(size)))
                          ).astype(np.int64)


@dataclass(frozen=True)
class WorkloadSpec:
    """What arrives: `requests` groups at `rate` per second (`arrivals` poisson or gamma with
    `cv`, or the times in `arrival_file`), prompt and output lengths, and the kind (`chat`, or
    `forking` with `branches` × `levels`); every prompt gains `prompt_extra` tokens (a
    vision-language target's image tokens)."""

    requests: int
    rate: float
    prompt: LengthDist
    output: LengthDist
    arrivals: str = "poisson"
    cv: float = 1.0
    arrival_file: Path | None = None
    kind: str = "chat"
    branches: int = 4
    levels: int = 1
    prompt_extra: int = 0

    def check(self) -> None:
        """Raise `InputError` naming the first bad option."""
        if self.requests < 1:
            raise InputError(f"--requests must be ≥ 1, got {self.requests}")
        if not self.rate > 0:
            raise InputError(f"--rate must be > 0 requests/s, got {self.rate}")
        if self.arrivals not in ARRIVALS:
            raise InputError(f"--arrivals must be one of {', '.join(ARRIVALS)}, "
                             f"got {self.arrivals!r}")
        if not self.cv > 0:
            raise InputError(f"--cv must be > 0, got {self.cv}")
        if self.kind not in WORKLOADS:
            raise InputError(f"--workload must be one of {', '.join(WORKLOADS)}, "
                             f"got {self.kind!r}")
        if self.branches < 1 or self.levels < 1:
            raise InputError(f"--fork-branches and --fork-levels must be ≥ 1, got "
                             f"{self.branches} and {self.levels}")

    @property
    def sequences_per_request(self) -> int:
        """Sequences one arrival generates."""
        if self.kind == "chat":
            return 1
        return sum(self.branches**level for level in range(1, self.levels + 1))


def arrival_times(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of the `spec.requests` groups, non-decreasing from the first gap."""
    n = spec.requests
    if spec.arrival_file is not None:
        return read_arrivals(spec.arrival_file, n)
    if spec.arrivals == "poisson":
        gaps = rng.exponential(1.0 / spec.rate, n)
    else:
        shape = 1.0 / spec.cv**2
        gaps = rng.gamma(shape, 1.0 / (spec.rate * shape), n)
    return np.cumsum(gaps)


def read_arrivals(path: Path, n: int) -> np.ndarray:
    """The first `n` arrival times of a file of one number of seconds per line, read a line at
    a time up to the n-th time (the rest of the file is never read)."""
    times: list[float] = []
    for i, line, _ in text_lines(Path(path), "arrival file"):
        if not line.strip():
            continue
        try:
            t = float(line.split(",")[0])
        except ValueError:
            raise InputError(f"{path}: line {i}: not a number of seconds: "
                             f"{line.strip()[:60]!r}") from None
        if not np.isfinite(t) or t < 0 or (times and t < times[-1]):
            raise InputError(f"{path}: line {i}: arrival times must be finite, ≥ 0 and "
                             f"non-decreasing, got {line.strip()[:60]!r}")
        times.append(t)
        if len(times) == n:
            return np.array(times)
    raise InputError(f"{path}: {len(times)} arrival times, --requests asks for {n}")


def build_groups(spec: WorkloadSpec, seed: int, trace_row: Callable[[int], int | None],
                 trace_lengths: Callable[[int], tuple[int, int]],
                 multiplier: Callable[[int], float]) -> list[Group]:
    """The groups of `spec`, in arrival order, with every sequence created (children linked to
    their parents). Sequence i replays `trace_row(i)`, whose (prompt, output) lengths
    `trace_lengths(row)` gives; group g's sequences have drift multiplier `multiplier(g)`."""
    rng = np.random.default_rng([seed, 0])
    arrivals = arrival_times(spec, rng)
    per = spec.sequences_per_request
    rows = [trace_row(i) for i in range(spec.requests * per)]
    if "trace" in (spec.prompt.kind, spec.output.kind) and rows[0] is None:
        raise InputError("--prompt-len/--output-len trace needs --trace")
    from_trace = [trace_lengths(r) if r is not None else (0, 0) for r in rows]
    prompts = (np.array([p for p, _ in from_trace[::per]]) if spec.prompt.kind == "trace"
               else spec.prompt.draw(rng, spec.requests))
    outputs = (np.array([o for _, o in from_trace]) if spec.output.kind == "trace"
               else spec.output.draw(rng, spec.requests * per))
    branches, levels = (1, 1) if spec.kind == "chat" else (spec.branches, spec.levels)
    groups, seq = [], 0
    for g in range(spec.requests):
        group = Group(g, float(arrivals[g]), int(prompts[g]) + spec.prompt_extra,
                      sequences=per)
        frontier: list[Request | None] = [None]
        for level in range(1, levels + 1):
            nxt = []
            for parent in frontier:
                start = group.prompt_len if parent is None else parent.prompt_len + \
                    parent.output_len
                for _ in range(branches):
                    r = Request(seq, group, start, int(outputs[seq]), level, parent, rows[seq],
                                multiplier(g))
                    (group.first if parent is None else parent.children).append(r)
                    nxt.append(r)
                    group.output_tokens += r.output_len
                    seq += 1
            frontier = nxt
        groups.append(group)
    return groups
