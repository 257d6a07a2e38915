"""Speculation schedules as each engine takes them: a `Schedule` of chains written as the engine's
own per-batch keys (`schedule_config`), and an engine's keys read back as the engine applies them
(`parse_schedule`). vLLM and TensorRT-LLM key on the running batch size alone and take a draft
length per batch size, so a bucket with a context range or a branching tree is refused.

vLLM, `num_speculative_tokens_per_batch_size` in `--speculative-config` (vllm-project/vllm#32374;
first released in 0.24.0, absent from 0.23.0; read in the 0.33.0 wheel, whose
`vllm/v1/spec_decode/dynamic/utils.py` is the same as 0.24.0's and 0.25.0's):

- a list of `[start, end, K]`, each an inclusive range of batch sizes
  (`vllm/config/speculative.py:524-529`); the batch size is the number of requests the step
  schedules (`vllm/v1/core/sched/scheduler.py:1709-1714`).
- `validate_and_normalize_dynamic_sd_schedule` (`utils.py:7-74`), run when the scheduler is
  built (`scheduler.py:322-328`): a non-empty list (l. 21-27) of 3-item entries (l. 31-35),
  start and end > 0 (l. 43-46), start ≤ end (l. 47-51), K ≥ 0 (l. 52-55); sorted by start, no
  range may overlap the one before (l. 59-65); the first starts at 1 (l. 67-72).
- `build_dynamic_sd_schedule_lookup` (`utils.py:77-148`) gives every batch size 1..max_num_seqs
  its range's K (l. 119-126), a gap between ranges the K of the range before it (l. 105-116),
  and the batch sizes past the last range its K (l. 140-146); each K clamped to
  `num_speculative_tokens` (> 0, `speculative.py:413`, the buffers' size), which is therefore
  written as the largest K. K = 0 schedules the step without drafts.
- dropped, with a warning, under data parallelism and, on model runner V1, for methods other
  than ngram, eagle, eagle3, mtp, draft_model and dflash (`vllm/config/vllm.py:1088-1127`).
- no release takes both a schedule and a tree: `speculative_token_tree` ends with 0.20.2
  (`vllm` module docstring) and the config rejects unknown keys, so a release before 0.24.0
  takes the best constant (a tree up to 0.20.2, a chain after).

TensorRT-LLM, `draft_len_schedule` in the LLM API's `speculative_config`
(NVIDIA/TensorRT-LLM#8194, #10860; `tensorrt_llm/llmapi/llm_args.py` at commit 0004396,
`DecodingBaseConfig`; `tensorrt_llm/_torch/speculative/utils.py`
`get_draft_len_for_batch_size`):

- a mapping batch-size threshold → draft length: a batch takes the value of the first key ≥ its
  size (`bisect_left`), and a batch above the largest key drafts nothing (the field's
  description: "Batch sizes 33+: use draft_len=0 (implicit, speculation disabled)").
- `validate_draft_len_schedule_and_sort`: keys ≥ 1, values ≥ 0, the smallest key's value equal
  to `max_draft_len` and none above it; sorted by key. `max_concurrency` beside it is refused
  (`validate_max_concurrency_and_draft_len_schedule_mutually_exclusive`). Keys are written as
  integers; the options file (JSON) holds them as strings, which the `dict[int, int]` field
  reads as integers.
- a chain needs no `eagle_choices` (a static tree), so none is written beside a schedule.

SGLang (0.5.23) takes no fixed schedule. `--speculative-adaptive` with
`--speculative-adaptive-config` (`sglang/srt/speculative/adaptive_spec_params.py`; EAGLE and
EAGLE3 at top-k 1 only, l. 56-100) keys candidate step counts by batch size (l. 103-139), routes a
batch to the largest key ≤ its CUDA-graph-padded size (l. 342-358), and moves among the
candidates by the acceptance it measures (`AdaptiveStepSlot`, l. 153-272). Its export is the best
constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from specscope.errors import InputError
from specscope.interop import sglang, tensorrt_llm, vllm
from specscope.interop.engine import is_count, shown
from specscope.schedule import Bucket, Schedule
from specscope.tree import DEFAULT_SOURCE, Tree

VLLM_KEY = "num_speculative_tokens_per_batch_size"
TRT_KEY = "draft_len_schedule"
V1_SCHEDULED = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
"""vLLM methods whose schedule model runner V1 keeps (`vllm/config/vllm.py:1095-1096`)."""


@dataclass(frozen=True)
class ScheduleExport:
    """An engine's configuration for a schedule (its own keys, checked by its rules; empty: no
    speculation) and what the engine does differently from the schedule, one line each."""

    config: dict[str, Any]
    notes: tuple[str, ...] = ()


def schedule_config(engine: str, schedule: Schedule, method: str, draft: str | None,
                    constant: Tree | None, vllm_release: str | None = None) -> ScheduleExport:
    """`schedule` as `engine` runs it with `method` and `draft`; where the engine (or the vLLM
    release, None: the current one) takes no schedule, `constant` (the best constant, None: no
    speculation) with a note saying so."""
    if engine == vllm.ENGINE:
        if vllm.release(vllm_release) >= vllm.FIRST_SCHEDULE_RELEASE:
            return _vllm(schedule, method, draft)
        return _vllm_constant(constant, method, draft, str(vllm_release))
    if engine == tensorrt_llm.ENGINE:
        return _tensorrt_llm(schedule, method, draft)
    if engine == sglang.ENGINE:
        note = ("SGLang takes no fixed per-batch schedule (--speculative-adaptive moves among "
                "candidate steps by measured acceptance): this is the best constant")
        if constant is None:
            return ScheduleExport({}, (f"{note}, no speculation: launch without speculative "
                                       "arguments",))
        return ScheduleExport(sglang.config_for(constant, method, draft), (note,))
    raise InputError(f"engine {engine!r} takes no schedule export (vllm, tensorrt-llm, sglang)")


def parse_schedule(engine: str, config: Mapping[str, Any], source: str = DEFAULT_SOURCE,
                   max_batch: int | None = None) -> Schedule:
    """The schedule `engine` runs for `config` (checked first), each draft a chain of `source`;
    `max_batch`: the server's largest batch, for TensorRT-LLM, whose batch sizes above the
    largest key draft nothing (None: the schedule ends at that key)."""
    if engine == vllm.ENGINE:
        return _parse_vllm(config, source)
    if engine == tensorrt_llm.ENGINE:
        return _parse_tensorrt_llm(config, source, max_batch)
    raise InputError(f"{engine} takes no per-batch schedule to parse (vllm, tensorrt-llm)")


def _drafts(engine: str, schedule: Schedule) -> list[tuple[Bucket, int]]:
    """Each bucket with its draft length; a context range or a branching tree refused."""
    out = []
    for i, b in enumerate(schedule.buckets):
        where = f"bucket {i} (batch {b.batch[0]}..{b.batch[1]})"
        if b.context is not None:
            raise InputError(f"{engine}: {where} also ranges over context; the engine's "
                             "schedule keys on the batch size alone")
        if b.tree is not None and not b.tree.is_chain:
            raise InputError(f"{engine}: {where} holds a tree that branches; the engine's "
                             "schedule takes a draft length (a chain) per batch size")
        out.append((b, b.drafts))
    return out


def _off(engine: str) -> ScheduleExport:
    return ScheduleExport({}, (f"the schedule never speculates: serve {engine} without a "
                               "speculative configuration",))


def _chain(k: int, source: str) -> Tree | None:
    return Tree.chain(k, source) if k > 0 else None


# ---- vLLM ---------------------------------------------------------------------------------

def _vllm(schedule: Schedule, method: str, draft: str | None) -> ScheduleExport:
    """`num_speculative_tokens_per_batch_size` and `num_speculative_tokens` its largest K."""
    drafts = _drafts(vllm.ENGINE, schedule)
    top = max(k for _, k in drafts)
    if top == 0:
        return _off(vllm.ENGINE)
    config = vllm.config_for(Tree.chain(top), method, draft)
    config[VLLM_KEY] = [[b.batch[0], b.batch[1], k] for b, k in drafts]
    _check_vllm(config)
    notes = []
    last, k = drafts[-1]
    if k == 0:
        notes.append(f"speculation is off from batch {last.batch[0]} on (K = 0; vLLM's last "
                     "range extends to max_num_seqs)")
    if method not in V1_SCHEDULED:
        notes.append(f"vLLM's model runner V1 drops the schedule for {method} and drafts "
                     f"{top} throughout (VLLM_USE_V2_MODEL_RUNNER=1 keeps it)")
    return ScheduleExport(config, tuple(notes))


def _vllm_constant(constant: Tree | None, method: str, draft: str | None, version: str
                   ) -> ScheduleExport:
    """A release before the schedule: the best constant (a branching one up to 0.20.2)."""
    note = (f"vLLM {version} takes no per-batch schedule ({VLLM_KEY} from "
            f"{'.'.join(map(str, vllm.FIRST_SCHEDULE_RELEASE))}): this is the best constant")
    if constant is None:
        return ScheduleExport({}, (f"{note}, no speculation: serve without "
                                   "--speculative-config",))
    if not constant.is_chain and vllm.release(version) > vllm.LAST_TREE_RELEASE:
        raise InputError(f"vllm {version} verifies chains only (tree attention left in 0.21); "
                         "the best constant branches")
    return ScheduleExport(vllm.config_for(constant, method, draft), (note,))


def _check_vllm(config: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """vLLM's rules for the schedule (module docstring), its entries sorted by start; one
    `InputError` naming the key."""
    vllm.check(dict(config))
    if "speculative_token_tree" in config:
        raise InputError(f"vllm: no release takes speculative_token_tree (≤ 0.20.2) beside "
                         f"{VLLM_KEY} (≥ 0.24.0)")
    rows = config.get(VLLM_KEY)
    if not isinstance(rows, list) or not rows:
        raise InputError(f"vllm: {VLLM_KEY} must be a non-empty list of [start, end, K], "
                         f"got {shown(rows)}")
    entries = []
    for row in rows:
        if not (isinstance(row, list | tuple) and len(row) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in row)):
            raise InputError(f"vllm: {VLLM_KEY} entry {shown(row)} is not [start, end, K] of "
                             "integers")
        start, end, k = row
        if start <= 0 or end <= 0 or start > end or k < 0:
            raise InputError(f"vllm: {VLLM_KEY} entry {list(row)} needs 0 < start ≤ end "
                             "and K ≥ 0")
        entries.append((start, end, k))
    entries.sort(key=lambda e: e[0])
    for before, after in pairwise(entries):
        if after[0] <= before[1]:
            raise InputError(f"vllm: {VLLM_KEY} ranges {list(before)} and {list(after)} "
                             "overlap")
    if entries[0][0] != 1:
        raise InputError(f"vllm: {VLLM_KEY}'s first range must start at 1, got "
                         f"{list(entries[0])}")
    return entries


def _parse_vllm(config: Mapping[str, Any], source: str) -> Schedule:
    """vLLM's lookup as ranges: a gap joins the range before it, every K clamped to
    `num_speculative_tokens`, K = 0 no speculation."""
    entries = _check_vllm(config)
    top = config["num_speculative_tokens"]
    buckets: list[Bucket] = []
    for start, end, k in entries:
        if buckets and start > buckets[-1].batch[1] + 1:
            buckets[-1] = Bucket((buckets[-1].batch[0], start - 1), None, buckets[-1].tree)
        buckets.append(Bucket((start, end), None, _chain(min(k, top), source)))
    return Schedule(tuple(buckets))


# ---- TensorRT-LLM -------------------------------------------------------------------------

def _tensorrt_llm(schedule: Schedule, method: str, draft: str | None) -> ScheduleExport:
    """`draft_len_schedule` keyed by each bucket's last batch size, `max_draft_len` the first
    bucket's length, which must be the largest."""
    drafts = _drafts(tensorrt_llm.ENGINE, schedule)
    top = max(k for _, k in drafts)
    if top == 0:
        return _off(tensorrt_llm.ENGINE)
    first, k1 = drafts[0]
    if k1 < top:
        i, (b, k) = next((i, d) for i, d in enumerate(drafts) if d[1] == top)
        raise InputError(f"tensorrt-llm: {TRT_KEY}'s smallest key carries max_draft_len, the "
                         f"longest draft; batch {first.batch[0]}..{first.batch[1]} drafts {k1} "
                         f"but bucket {i} (batch {b.batch[0]}..{b.batch[1]}) drafts {k}")
    config = tensorrt_llm.config_for(Tree.chain(top), method, draft)
    config.pop("eagle_choices", None)
    config[TRT_KEY] = {b.batch[1]: k for b, k in drafts}
    _check_tensorrt_llm(config)
    last, k = drafts[-1]
    note = (f"speculation is off from batch {last.batch[0]} on (draft length 0)" if k == 0 else
            f"speculation is off above batch {last.batch[1]} (TensorRT-LLM drafts nothing "
            "past the largest key)")
    return ScheduleExport(config, (note,))


def _check_tensorrt_llm(config: Mapping[str, Any]) -> dict[int, int]:
    """TensorRT-LLM's rules for the schedule (module docstring), sorted by key; one
    `InputError` naming the field."""
    tensorrt_llm.check(dict(config))
    table = config.get(TRT_KEY)
    if not isinstance(table, Mapping) or not table:
        raise InputError(f"tensorrt-llm: {TRT_KEY} must map batch sizes to draft lengths, got "
                         f"{shown(table)}")
    if config.get("max_concurrency") is not None:
        raise InputError(f"tensorrt-llm: max_concurrency and {TRT_KEY} are mutually exclusive")
    out: dict[int, int] = {}
    for key, value in table.items():
        batch = _threshold(key)
        if batch is None or batch < 1 or batch in out:
            raise InputError(f"tensorrt-llm: {TRT_KEY} key {shown(key)} is not a distinct "
                             "batch size ≥ 1")
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise InputError(f"tensorrt-llm: {TRT_KEY}[{batch}] must be a draft length ≥ 0, "
                             f"got {shown(value)}")
        out[batch] = value
    top, smallest = config["max_draft_len"], min(out)
    if out[smallest] != top or max(out.values()) > top:
        raise InputError(f"tensorrt-llm: {TRT_KEY}'s smallest key {smallest} must carry "
                         f"max_draft_len {top} and no length exceed it, got {shown(out)}")
    return dict(sorted(out.items()))


def _threshold(key: object) -> int | None:
    """A schedule key as the `dict[int, int]` field reads it: an integer, or its decimal
    string (JSON and quoted YAML keys)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    return int(key) if isinstance(key, str) and key.isdecimal() else None


def _parse_tensorrt_llm(config: Mapping[str, Any], source: str, max_batch: int | None
                        ) -> Schedule:
    """TensorRT-LLM's lookup as ranges: each key's length from the key before it (exclusive)
    up to the key, 0 no speculation; above the largest key up to `max_batch`, none."""
    if max_batch is not None and not is_count(max_batch):
        raise InputError(f"max batch {shown(max_batch)} must be an integer ≥ 1")
    buckets: list[Bucket] = []
    low = 1
    for key, k in _check_tensorrt_llm(config).items():
        buckets.append(Bucket((low, key), None, _chain(k, source)))
        low = key + 1
    if max_batch is not None and max_batch >= low:
        buckets.append(Bucket((low, max_batch), None, None))
    return Schedule(tuple(buckets))
