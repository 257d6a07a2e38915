"""A paper's scenario: one `[[case]]` table of an `examples/papers/*.toml` file, read and checked.

Each case states the setup a paper published (hardware, target, draft, precision, batch, context,
tree, the mean accepted length τ it measured) and the speedup it reported; `reproduce` prices the
same setup with the system's mechanism and compares. Keys (docs/architecture.md's conventions
apply: a tree is tokens per drafted level, `"4,16,16,16,16"`, root not counted):

    name, system, hw, target        required
    published_speedup               required unless published_tokens_per_s is given
    tau                             mean tokens per step as published (the bonus counted when
                                    tau_includes_bonus, default true)
    draft, weight_bits, act_bits, batch, context, new_tokens, tree, runtime, images, tp,
    baseline, baseline_tau, source
    setup                           "complete" (default) or "partial": an input that sets the
                                    price (τ or acceptance, the draft structure, a model, the
                                    GPU) is not given by any reachable source for this row
                                    (validate/accuracy.py reports such rows apart)
    ep, precision, expert_precision, kv_bits
                                    the target's expert-parallel degree and number formats, as
                                    `--ep`, `--precision`, `--expert-precision` and `--kv-bits`
                                    (default 1, bf16, the precision's, 16)
    offload                         fraction of the target's weights streamed from host memory
                                    every forward (docs/hardware.md#weight-offloading)
    gpus                            devices holding the models (default tp): more than tp when
                                    the layers are split over devices in sequence (Hugging
                                    Face's device_map="auto"), which adds their memory, not
                                    their speed, at batch 1; the setup must fit in them
    engine, baseline_engine, draft_runtime, tree_attention
                                    the software the paper ran (hw_profiles/data/engines:
                                    runtimes, tree attention, the loop's host work), the one
                                    its baseline ran if another (stock `transformers.generate`
                                    under a research stack's method), and the draft's runtime
                                    where it differs from the engine's (`runtime` overrides the
                                    target's), and the tree attention where the paper's own
                                    differs from its engine's (LongSpec's split)
    anchor_speedup                  the same setup's published speedup at batch 1, for a
                                    source that publishes speedups over batch but no τ: τ is
                                    the one whose batch-1 prediction meets it, and the case
                                    (at its own batch > 1) is predicted with that τ (instead
                                    of tau)
    timed_prefill                   true when the source timed whole requests, prompt forwards
                                    included (a throughput over a run, a script's wall time):
                                    each request's prefill enters its time per token as
                                    prefill / new_tokens, on both sides (default false: the
                                    source timed generation)
    any key of the system's own `OPTIONS` (window, exit_fraction, …)

An engine named by path (`engine = "my-engine.toml"`, likewise `baseline_engine`) is read from
the case file's folder when relative, as a TOML file's other relative paths are.

Every mistake is an `InputError` that names the file and the case: an unknown system, key, model
or hardware profile, a value of the wrong type, a number that is not finite (nan, inf), τ below 1
where the bonus is counted, and τ (or the τ an anchor needs) above what a step can yield: a tree
of d drafted levels accepts at most d tokens a step and adds the bonus, so τ ≤ d + 1
(`tree_tokens`; each system states its own bound, `System.most_tokens`).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_toml
from specscope.hw_profiles.deployment import Deployment, deployment
from specscope.hw_profiles.engine import DEFAULT_ENGINE
from specscope.models.precision import KV_BITS, PRECISIONS

SETUPS = ("complete", "partial")
BASELINES = ("autoregressive", "head", "draft-model")
"""What a case's speedup is over: autoregressive decoding of the same target (default), or
that target speculated by an EAGLE-style head or a draft model at `baseline_tau`."""


@dataclass(frozen=True)
class Case:
    """One published scenario (module docstring); `options` holds the system's own keys."""

    name: str
    system: str
    hw: str
    target: str
    where: str
    tau: float = 1.0
    tau_includes_bonus: bool = True
    published_speedup: float | None = None
    published_tokens_per_s: float | None = None
    draft: str | None = None
    weight_bits: int | None = None
    act_bits: int = 16
    batch: int = 1
    context: int = 512
    new_tokens: int = 256
    tree: tuple[int, ...] = ()
    runtime: str | None = None
    images: int = 0
    tp: int = 1
    baseline: str = "autoregressive"
    baseline_tau: float | None = None
    source: str = ""
    setup: str = "complete"
    engine: str | None = None
    baseline_engine: str | None = None
    draft_runtime: str | None = None
    tree_attention: str | None = None
    offload: float = 0.0
    gpus: int | None = None
    anchor_speedup: float | None = None
    timed_prefill: bool = False
    ep: int = 1
    precision: str = "bf16"
    expert_precision: str | None = None
    kv_bits: int = 16
    options: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def deployment(self) -> Deployment:
        """What the case deploys, resolved once: its engine (specscope's own when the case
        states only a tree attention or a baseline engine), runtimes, tree attention, the
        target's precision, number formats, tp, expert parallelism and offloaded fraction, and
        the batch."""
        engine = self.engine or (DEFAULT_ENGINE if self.tree_attention else None)
        return deployment(self.hw, target=self.target, drafter=self.draft, engine=engine,
                          runtime=self.runtime, draft_runtime=self.draft_runtime,
                          tree_attention=self.tree_attention,
                          baseline_engine=self.baseline_engine, weight_bits=self.weight_bits,
                          tp=self.tp, offload=self.offload, batch=self.batch, ep=self.ep,
                          precision=self.precision, expert_precision=self.expert_precision,
                          kv_bits=self.kv_bits)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a step yields, the bonus token counted."""
        return self.tau if self.tau_includes_bonus else self.tau + 1.0

    @property
    def decode_context(self) -> float:
        """Mean tokens before a decoding step: the prompt and half the new tokens."""
        return self.context + self.new_tokens / 2

    def fail(self, message: str) -> InputError:
        """An `InputError` naming the file and this case."""
        return InputError(f"{self.where}: case {self.name!r}: {message}")


_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str, "system": str, "hw": str, "target": str, "tau": (int, float),
    "tau_includes_bonus": bool, "published_speedup": (int, float),
    "published_tokens_per_s": (int, float), "draft": str, "weight_bits": int, "act_bits": int,
    "batch": int, "context": int, "new_tokens": int, "tree": str, "runtime": str, "images": int,
    "tp": int, "baseline": str, "baseline_tau": (int, float), "source": str, "setup": str,
    "engine": str, "baseline_engine": str, "draft_runtime": str, "tree_attention": str,
    "offload": (int, float), "gpus": int, "anchor_speedup": (int, float), "timed_prefill": bool,
    "ep": int, "precision": str, "expert_precision": str, "kv_bits": int,
}
"""The shared keys and their TOML types."""


def parse_tree(text: str, where: str) -> tuple[int, ...]:
    """Tokens per drafted level from `"4,16,16"`; "" is no tree (autoregressive)."""
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise InputError(f"{where}: tree {text!r} must be comma-separated integers") from None
    if any(w < 1 for w in widths):
        raise InputError(f"{where}: tree {text!r} has a level without tokens")
    return widths


def case_from_table(table: Mapping[str, Any], where: str, options: Mapping[str, type]) -> Case:
    """Check one `[[case]]` table against the shared keys and the system's `options` (name →
    type); the system itself is resolved by the caller."""
    name = table.get("name")
    label = f"{where}: case {name!r}" if isinstance(name, str) else f"{where}: a case"
    missing = [k for k in ("name", "system", "hw", "target") if k not in table]
    if missing:
        raise InputError(f"{label}: missing key {missing[0]!r}")
    shared, own = {}, {}
    for key, value in table.items():
        expected = _TYPES.get(key) or options.get(key)
        if expected is None:
            known = sorted([*_TYPES, *options])
            raise InputError(f"{label}: unknown key {key!r} for system {table['system']!r}; "
                             f"known: {', '.join(known)}")
        _check_type(key, value, expected, label)
        if key in _TYPES and isinstance(value, str) and key not in ("source", "tree") \
                and not value.strip():
            raise InputError(f"{label}: {key} = \"\" names nothing; leave the key out for "
                             "the default")
        (shared if key in _TYPES else own)[key] = value
    if "published_speedup" not in shared and "published_tokens_per_s" not in shared:
        raise InputError(f"{label}: give published_speedup or published_tokens_per_s")
    if "anchor_speedup" in shared and "tau" in shared:
        raise InputError(f"{label}: give tau or anchor_speedup (τ solved from batch 1), "
                         "not both")
    if "tree" in shared:
        shared["tree"] = parse_tree(shared["tree"], label)
    for key in ("engine", "baseline_engine"):
        if key in shared:
            shared[key] = engine_path(shared[key], where, label, key)
    for key in ("tau", "baseline_tau", "published_speedup", "published_tokens_per_s", "offload",
                "anchor_speedup"):
        if key in shared:
            shared[key] = float(shared[key])
    case = Case(where=where, options=own, **shared)
    _check(case)
    return case


def engine_path(name: str, where: str, label: str, key: str) -> str:
    """An engine as a case names it: a shipped name as it is; a TOML path relative to the case
    file's folder (`where`), which must exist."""
    if not name.endswith(".toml"):
        return name
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = Path(where).parent / path
    if not path.is_file():
        raise InputError(f"{label}: {key} = {name!r}: no engine file {str(path)!r} (a relative "
                         "path is read from the case file's folder)")
    return str(path)


def tree_tokens(case: Case) -> tuple[float, str] | None:
    """The most tokens a step of the case's tree yields and what says so: every drafted level
    accepted and the bonus token, `len(tree) + 1` (None without a tree). This is the bound of
    every system whose `tree` is the verified tree's tokens per drafted level."""
    if not case.tree:
        return None
    depth = len(case.tree)
    return depth + 1.0, (f"tree {','.join(map(str, case.tree))}: {depth} drafted "
                         f"level{'s' if depth > 1 else ''} + the bonus token")


def check_tokens(case: Case, tokens: float, most: tuple[float, str] | None,
                 what: str = "") -> None:
    """Refuse `tokens` a step (bonus counted) above `most` (`tree_tokens`' form); `what` names
    the value (default: the case's τ, as the case counts it)."""
    if most is None or tokens <= most[0] + 1e-9:
        return
    if not what:
        what = (f"τ = {case.tau:g} (the bonus counted)" if case.tau_includes_bonus
                else f"τ = {case.tau:g} (+ the bonus = {tokens:g})")
    raise case.fail(f"{what} is more than the {most[0]:g} tokens a step can yield "
                    f"({most[1]})")


def parse_options(text: str, options: Mapping[str, type | tuple[type, ...]], system: str,
                  option: str) -> dict[str, Any]:
    """A system's own keys from `key=value,key=value` (`simulate --system-options`), each
    parsed as a TOML value and checked against the system's `options`."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in options:
            raise InputError(f"{option}: {item!r} is not KEY=VALUE with a key of system "
                             f"{system} ({', '.join(options) or 'it has none'})")
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = value.strip()  # a bare word is a string
        _check_type(key.strip(), parsed, options[key.strip()], option)
        out[key.strip()] = parsed
    return out


def check_options(values: Mapping[str, Any], options: Mapping[str, type | tuple[type, ...]],
                  system: str, label: str) -> dict[str, Any]:
    """A system's own keys from a table (a sweep's `[system_options.NAME]`), checked."""
    if not isinstance(values, Mapping):
        raise InputError(f"{label}: a table of {system}'s keys, got {values!r}")
    for key, value in values.items():
        if key not in options:
            raise InputError(f"{label}: unknown key {key!r} of system {system} (known: "
                             f"{', '.join(options) or 'none'})")
        _check_type(key, value, options[key], label)
    return dict(values)


def _check_type(key: str, value: Any, expected: type | tuple[type, ...], label: str) -> None:
    if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
        raise InputError(f"{label}: {key} = {value!r} is not a {_type_name(expected)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{label}: {key} = {value!r} is not a finite number")


def _type_name(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    names = {int: "number", float: "number", str: "string", bool: "boolean"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _check(case: Case) -> None:
    """Ranges every system shares."""
    if case.tokens_per_step < 1.0:
        what = "τ (bonus counted)" if case.tau_includes_bonus else "τ + 1"
        raise case.fail(f"{what} = {case.tokens_per_step:g} is below 1: a step yields at "
                        "least one token")
    for key in ("batch", "new_tokens", "tp", "ep"):
        if getattr(case, key) < 1:
            raise case.fail(f"{key} = {getattr(case, key)} must be at least 1")
    for key in ("context", "images"):
        if getattr(case, key) < 0:
            raise case.fail(f"{key} = {getattr(case, key)} must not be negative")
    if not 0.0 <= case.offload <= 1.0:
        raise case.fail(f"offload = {case.offload:g} must be a fraction in [0, 1]")
    if case.gpus is not None and case.gpus < case.tp:
        raise case.fail(f"gpus = {case.gpus} must be at least tp = {case.tp}")
    for key in ("precision", "expert_precision"):
        if getattr(case, key) not in (None, *PRECISIONS):
            raise case.fail(f"{key} = {getattr(case, key)!r} must be one of "
                            f"{', '.join(PRECISIONS)}")
    if case.kv_bits not in KV_BITS:
        raise case.fail(f"kv_bits = {case.kv_bits} must be one of "
                        f"{', '.join(map(str, KV_BITS))}")
    if case.act_bits not in (16, 8):
        raise case.fail(f"act_bits = {case.act_bits} must be 16 or 8")
    if case.setup not in SETUPS:
        raise case.fail(f"setup = {case.setup!r} must be one of {', '.join(SETUPS)}")
    if case.baseline not in BASELINES:
        raise case.fail(f"baseline = {case.baseline!r} must be one of {', '.join(BASELINES)}")
    if case.baseline != "autoregressive" and case.baseline_tau is None:
        raise case.fail(f"baseline {case.baseline!r} needs baseline_tau")
    if case.baseline_tau is not None and (case.baseline_tau + (0.0 if case.tau_includes_bonus
                                                                else 1.0)) < 1.0:
        raise case.fail(f"baseline_tau = {case.baseline_tau:g} is below 1 token a step")
    if case.anchor_speedup is not None:
        if case.batch == 1 or case.baseline != "autoregressive":
            raise case.fail("anchor_speedup anchors a batch > 1 case over autoregressive "
                            "decoding at batch 1")
        if not case.anchor_speedup > 0:
            raise case.fail(f"anchor_speedup = {case.anchor_speedup:g} must be positive")
    for key in ("published_speedup", "published_tokens_per_s"):
        value = getattr(case, key)
        if value is not None and value <= 0:
            raise case.fail(f"{key} = {value:g} must be positive")


def read_case_tables(path: Path) -> list[dict[str, Any]]:
    """The `[[case]]` tables of one TOML file."""
    where = str(path)
    data = read_toml(path, "scenario file")
    unknown = sorted(set(data) - {"case"})
    if unknown:
        raise InputError(f"{where}: unknown top-level key {unknown[0]!r} (cases are [[case]])")
    tables = data.get("case", [])
    if not isinstance(tables, list) or not tables:
        raise InputError(f"{where}: no [[case]] tables")
    return [dict(t) for t in tables]

