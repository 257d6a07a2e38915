"""Schedule export: a `Schedule` written as vLLM's and TensorRT-LLM's own per-batch keys and read
back as each engine applies them (rules transcribed in `specscope.interop.schedules`), the
engines' own examples, SGLang's and older vLLM releases' best constant, and the refusals."""

from __future__ import annotations

import json

import pytest

from specscope.errors import InputError
from specscope.interop import tensorrt_llm, vllm
from specscope.interop.schedules import parse_schedule, schedule_config
from specscope.schedule import Bucket, Schedule
from specscope.tree import Tree

HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
METHOD = {"vllm": "eagle3", "tensorrt-llm": "Eagle3", "sglang": "EAGLE3"}
ENGINES = ("vllm", "tensorrt-llm")


def schedule(*rows: tuple[int, int, int]) -> Schedule:
    """Buckets (lo, hi, K) of chains, K = 0 no speculation."""
    return Schedule(tuple(Bucket((lo, hi), None, Tree.chain(k) if k else None)
                          for lo, hi, k in rows))


def export(engine: str, s: Schedule, constant: Tree | None = None, release: str | None = None):
    return schedule_config(engine, s, METHOD[engine], HEAD, constant, release)


def lengths(s: Schedule, batches) -> list[int]:
    return [0 if (t := s.choice(b)) is None else t.size - 1 for b in batches]


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ---- round trips --------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rows", [
    [(1, 4, 4), (5, 16, 2), (17, 64, 0)],
    [(1, 8, 3), (9, 9, 3), (10, 256, 1)],
    [(1, 1, 5)],
])
def test_round_trip(engine, rows):
    s = schedule(*rows)
    out = export(engine, s)
    assert parse_schedule(engine, out.config) == s
    # through the JSON the command line carries (TensorRT-LLM's keys become strings)
    assert parse_schedule(engine, json.loads(json.dumps(out.config))) == s


def test_vllm_keys_and_command():
    out = export("vllm", schedule((1, 4, 4), (5, 16, 2), (17, 64, 0)))
    assert out.config["num_speculative_tokens"] == 4  # the largest K: vLLM clamps to it
    assert out.config["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 16, 2],
                                                                   [17, 64, 0]]
    assert "speculative_token_tree" not in out.config
    line = vllm.command(out.config, "meta-llama/Llama-3.1-8B-Instruct")
    assert "TREE_ATTN" not in line and "[[1,4,4],[5,16,2],[17,64,0]]" in line


def test_tensorrt_llm_keys_and_command():
    out = export("tensorrt-llm", schedule((1, 4, 4), (5, 8, 2), (9, 32, 1)))
    assert out.config["max_draft_len"] == 4  # the smallest key's length
    assert out.config["draft_len_schedule"] == {4: 4, 8: 2, 32: 1}
    assert "eagle_choices" not in out.config  # a chain, not a static tree
    assert '"draft_len_schedule":{"4":4,"8":2,"32":1}' in tensorrt_llm.command(
        out.config, "meta-llama/Llama-3.1-8B-Instruct")


# ---- the engines' own examples ------------------------------------------------------------

VLLM_PR = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
           "num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": [[1, 16, 3], [64, 128, 2], [256, 4096, 0]]}
"""vllm-project/vllm#32374's example (its ranges "1-16": 3, "64-128": 2, "256-4096": 0 in the
list form the released field takes, as tests/v1/spec_decode/test_dynamic_sd.py writes it)."""


def test_vllm_pr_example():
    s = parse_schedule("vllm", VLLM_PR)
    # gaps take the range before them; past the last range its K, here 0 (off)
    assert lengths(s, [1, 16, 17, 63, 64, 128, 129, 255, 256, 4096, 10_000]) == [
        3, 3, 3, 3, 2, 2, 2, 2, 0, 0, 0]


def test_vllm_upstream_lookup_test():
    """vLLM's test_dynamic_sd_uses_batch_size_schedule: [(1, 16, 3), (32, 128, 2),
    (256, 2048, 0)] looked up at these batch sizes."""
    config = {**VLLM_PR, "num_speculative_tokens_per_batch_size": [[1, 16, 3], [32, 128, 2],
                                                                   [256, 2048, 0]]}
    expected = {1: 3, 16: 3, 17: 3, 31: 3, 32: 2, 128: 2, 129: 2, 255: 2, 256: 0}
    assert lengths(parse_schedule("vllm", config), expected) == list(expected.values())


def test_vllm_clamps_to_num_speculative_tokens():
    """vLLM's test_dynamic_sd_clamps_k_to_runtime_max: K 4 under num_speculative_tokens 3."""
    config = {**VLLM_PR, "num_speculative_tokens_per_batch_size": [[1, 256, 4]]}
    assert parse_schedule("vllm", config) == schedule((1, 256, 3))


def test_vllm_ranges_in_any_order():
    config = {**VLLM_PR, "num_speculative_tokens_per_batch_size": [[17, 32, 1], [1, 16, 3]]}
    assert parse_schedule("vllm", config) == schedule((1, 16, 3), (17, 32, 1))


TRT_PR = {"decoding_type": "Eagle3", "max_draft_len": 4, "speculative_model": HEAD,
          "draft_len_schedule": {4: 4, 8: 2, 32: 1}}
"""NVIDIA/TensorRT-LLM#10860's example (`draft_len_schedule = {4: 4, 8: 2, 32: 1}`, the field's
description in llm_args.py)."""


@pytest.mark.parametrize("keys", [int, str])
def test_tensorrt_llm_pr_example(keys):
    config = {**TRT_PR, "draft_len_schedule": {keys(k): v for k, v in
                                               TRT_PR["draft_len_schedule"].items()}}
    s = parse_schedule("tensorrt-llm", config, max_batch=64)
    # the first key ≥ the batch; above the largest key no drafts
    assert lengths(s, [1, 4, 5, 8, 9, 32, 33, 64]) == [4, 4, 2, 2, 1, 1, 0, 0]
    assert s.buckets[-1] == Bucket((33, 64), None, None)
    assert parse_schedule("tensorrt-llm", config).max_batch == 32


# ---- what the engine does beyond the schedule ---------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_last_range_off_is_said(engine):
    out = export(engine, schedule((1, 8, 3), (9, 512, 0)))
    assert any("off from batch 9" in n for n in out.notes)


def test_tensorrt_llm_says_it_stops_past_the_last_key():
    out = export("tensorrt-llm", schedule((1, 8, 3), (9, 128, 1)))
    assert any("off above batch 128" in n for n in out.notes)


def test_vllm_suffix_note():
    out = schedule_config("vllm", schedule((1, 8, 3), (9, 64, 1)), "suffix", None, None)
    assert any("runner V1 drops the schedule for suffix" in n for n in out.notes)
    assert not export("vllm", schedule((1, 8, 3), (9, 64, 1))).notes


@pytest.mark.parametrize("engine", ENGINES)
def test_never_speculating(engine):
    out = export(engine, schedule((1, 64, 0)))
    assert out.config == {} and "never speculates" in out.notes[0]


# ---- engines and releases without a schedule: the best constant --------------------------

def test_sglang_writes_the_best_constant():
    out = export("sglang", schedule((1, 8, 3), (9, 64, 1)), Tree.chain(2))
    assert out.config["speculative_num_steps"] == 2
    assert out.config["speculative_num_draft_tokens"] == 3
    assert "best constant" in out.notes[0]
    assert export("sglang", schedule((1, 8, 3)), None).config == {}


def test_vllm_tree_release_takes_a_branching_constant():
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0), (1, 0)])
    out = export("vllm", schedule((1, 8, 3), (9, 64, 1)), tree, "0.20.2")
    assert out.config["speculative_token_tree"] == "[(0,), (1,), (0, 0), (1, 0)]"
    assert "num_speculative_tokens_per_batch_size" not in out.config
    assert "0.20.2 takes no per-batch schedule" in out.notes[0]
    with pytest.raises(InputError) as exc:
        export("vllm", schedule((1, 8, 3)), tree, "0.22.1")
    assert "chains only" in one_line(exc)
    chain = export("vllm", schedule((1, 8, 3)), Tree.chain(3), "0.23.0")
    assert chain.config["num_speculative_tokens"] == 3 and "best constant" in chain.notes[0]
    assert export("vllm", schedule((1, 8, 3)), None, "0.24").config[
        "num_speculative_tokens_per_batch_size"] == [[1, 8, 3]]


@pytest.mark.parametrize("version", ["0.x", "1", "v0.20.2", "0.20.2.1"])
def test_vllm_release_malformed(version):
    with pytest.raises(InputError) as exc:
        vllm.release(version)
    assert "X.Y.Z" in one_line(exc)


# ---- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_branching_tree_refused_naming_the_bucket(engine):
    s = Schedule((Bucket((1, 4), None, Tree.chain(3)),
                  Bucket((5, 9), None, Tree.from_rank_paths([(0,), (1,)]))))
    with pytest.raises(InputError) as exc:
        export(engine, s)
    assert "bucket 1 (batch 5..9)" in one_line(exc) and "branches" in str(exc.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_context_ranges_refused(engine):
    s = Schedule((Bucket((1, 4), (0, 1000), Tree.chain(3)),
                  Bucket((1, 4), (1001, 9000), Tree.chain(1))))
    with pytest.raises(InputError) as exc:
        export(engine, s)
    assert "context" in one_line(exc)


def test_tensorrt_llm_needs_the_longest_draft_first():
    with pytest.raises(InputError) as exc:
        export("tensorrt-llm", schedule((1, 4, 2), (5, 8, 4)))
    assert "bucket 1 (batch 5..8) drafts 4" in one_line(exc)


@pytest.mark.parametrize("rows, why", [
    ([], "non-empty list"),
    ({"1-16": 3, "64-128": 2}, "non-empty list"),
    ([[1, 16, 3], [32, 64]], "is not [start, end, K]"),
    ([[1, 16, "3"]], "is not [start, end, K]"),
    ([[1, 16, -1]], "K ≥ 0"),
    ([[0, 16, 3]], "0 < start"),
    ([[1, 16, 3], [20, 17, 2]], "start ≤ end"),
    ([[1, 16, 3], [16, 32, 2]], "overlap"),
    ([[2, 16, 3]], "start at 1"),
])
def test_vllm_malformed(rows, why):
    with pytest.raises(InputError) as exc:
        parse_schedule("vllm", {**VLLM_PR, "num_speculative_tokens_per_batch_size": rows})
    assert why in one_line(exc)


def test_vllm_schedule_beside_a_tree_refused():
    config = {**VLLM_PR, "speculative_token_tree": "[(0,), (0, 0), (0, 0, 0)]"}
    with pytest.raises(InputError) as exc:
        parse_schedule("vllm", config)
    assert "speculative_token_tree" in one_line(exc)


@pytest.mark.parametrize("change, why", [
    ({"draft_len_schedule": {}}, "must map batch sizes"),
    ({"draft_len_schedule": [[4, 4]]}, "must map batch sizes"),
    ({"draft_len_schedule": {0: 4}}, "batch size ≥ 1"),
    ({"draft_len_schedule": {"x": 4}}, "batch size ≥ 1"),
    ({"draft_len_schedule": {4: 4, "4": 2}}, "distinct"),
    ({"draft_len_schedule": {4: 4, 8: -1}}, "draft length ≥ 0"),
    ({"draft_len_schedule": {4: 3, 8: 2}}, "must carry max_draft_len 4"),
    ({"draft_len_schedule": {4: 4, 8: 5}}, "no length exceed"),
    ({"max_concurrency": 16}, "mutually exclusive"),
])
def test_tensorrt_llm_malformed(change, why):
    with pytest.raises(InputError) as exc:
        parse_schedule("tensorrt-llm", {**TRT_PR, **change})
    assert why in one_line(exc)


def test_unknown_engines_refused():
    with pytest.raises(InputError) as exc:
        parse_schedule("sglang", {})
    assert "no per-batch schedule" in one_line(exc)
    with pytest.raises(InputError) as exc:
        schedule_config("transformers", schedule((1, 4, 2)), "x", None, None)
    assert "no schedule export" in one_line(exc)
