"""LongSpec and ViSpec: the limits their mechanisms must meet exactly (a window as long as the
context is a full-KV draft; a request without images is the text model drafted by a head), how
their steps are priced, their bad options, and their shipped scenarios' headlines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model
from specscope.systems import head, longspec, vispec
from specscope.systems.case import Case
from specscope.systems.head import head_model, head_spec
from specscope.systems.reproduce import predict_case, reproduce

PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"
EXACT = 1e-9


def _longspec(**fields: object) -> Case:
    base = {"name": "ls", "system": "longspec", "hw": "a100", "target": "longchat-13b-16k",
            "where": "t.toml", "tree": (4, 16, 16, 16, 16), "tau": 4.46, "context": 7792,
            "new_tokens": 1024, "runtime": "eager", "published_speedup": 3.26}
    return Case(**(base | fields))


def _vispec(**fields: object) -> Case:
    base = {"name": "vs", "system": "vispec", "hw": "a100", "target": "llava-1.6-7b",
            "where": "t.toml", "tree": (8, 8, 8, 6), "tau": 2.98, "tau_includes_bonus": False,
            "context": 64, "new_tokens": 200, "images": 1, "runtime": "eager",
            "published_speedup": 2.58}
    return Case(**(base | fields))


def _ops_equal(got: list, want: list) -> None:
    assert [op.op for op in got] == [op.op for op in want]
    for a, b in zip(got, want, strict=True):
        assert (a.count, a.kind) == (b.count, b.kind)
        for name in ("flops", "weight_bytes", "act_bytes", "kv_bytes", "qweights", "tokens",
                     "reduce_bytes"):
            assert np.allclose(getattr(a, name), getattr(b, name), rtol=EXACT, atol=0), \
                (a.op, name)


# ---- LongSpec ---------------------------------------------------------------------------------

@pytest.mark.parametrize("runtime", ["graph", "eager"])
@pytest.mark.parametrize("new_tokens", [1, 16])
def test_a_window_as_long_as_the_context_prices_a_full_kv_draft(runtime: str,
                                                                new_tokens: int) -> None:
    """The reference is the same one-layer spec with an ordinary self-attention over the whole
    context (`head_spec`'s `CostModel`: head.HeadCost without its fc, since LongSpec's draft
    reads token embeddings only) plus the cross-attention block, whose 4 operators cost an eager
    host 4/7 of a 7-operator layer's issue time more."""
    context, hw = 8000, load_profile("a100")
    target = get_model("longchat-13b-16k")
    draft = longspec.draft_model(_longspec(runtime=runtime,
                                           options={"window": context + new_tokens}), target)
    full = CostModel(hw, head_spec(target), runtime=runtime)
    cross = draft.cross_attention_ops(1, new_tokens, context)
    reference = [*full.ops(1, new_tokens, context), *cross]
    _ops_equal(draft.ops(1, new_tokens, context), reference)

    r = full.runtime
    host = r.host_step_s + r.host_layer_s * (1 + 4 / 7)
    device = sum(full.op_time(op, new_tokens, context)[0] for op in reference)
    device += sum(full.extras(reference).values())
    assert draft.host_time(context) == pytest.approx(host, rel=EXACT)
    assert draft.forward_time(1, new_tokens, context) == pytest.approx(max(host, device),
                                                                       rel=EXACT)
    wider = longspec.draft_model(_longspec(runtime=runtime, options={"window": 10 ** 6}), target)
    assert wider.forward_time(1, new_tokens, context) == pytest.approx(
        draft.forward_time(1, new_tokens, context), rel=EXACT)


def test_the_window_caps_the_drafts_kv_and_the_cross_attention_reads_one_layer() -> None:
    target = get_model("longchat-13b-16k")
    draft = longspec.draft_model(_longspec(runtime="graph"), target)
    kv_row = 2 * target.n_kv_heads * target.head_dim * 2
    for context in (4000, 16000):
        ops = {op.op: op for op in draft.ops(1, 4, context)}
        assert ops["attention"].kv_bytes == pytest.approx((512 + 4 + 4) * kv_row, rel=EXACT)
        assert ops["cross_attention"].kv_bytes == pytest.approx(context * kv_row, rel=EXACT)
    full = longspec.draft_model(_longspec(runtime="graph", options={"window": 20000}), target)
    assert draft.forward_time(1, 4, 16000) < full.forward_time(1, 4, 16000)


def test_longspec_prices_its_tree_level_by_level_against_flash_autoregressive_decoding() -> None:
    case = _longspec()
    c = longspec.costs(case)
    p = longspec.predict(case)
    context = round(case.decode_context)
    levels = sum(float(c.drafter.forward_time(1, w, context)) for w in (1, 4, 16, 16, 16))
    assert c.target.tree_attention == "split" and c.source == "longspec"
    assert p.parts["draft"] == pytest.approx(levels, rel=EXACT)
    assert p.parts["verify"] == pytest.approx(c.target.verify_time(69, context), rel=EXACT)
    assert p.baseline_s == pytest.approx(c.target.forward_time(1, 1, context), rel=EXACT)
    assert p.speedup == pytest.approx(4.46 * p.baseline_s / p.step_s, rel=EXACT)


@pytest.mark.parametrize("fields, message", [
    ({"options": {"window": 0}}, "window = 0 must be at least 1"),
    ({"tree": ()}, "needs a tree"),
])
def test_longspec_rejects_bad_cases(fields: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        longspec.predict(_longspec(**fields))


def test_longspec_rows_within_15_percent_at_the_median() -> None:
    rows = reproduce(PAPERS / "longspec.toml")
    assert np.median([abs(r.rel_err) for r in rows]) < 0.15
    headline = next(r for r in rows if r.case.name == "longspec-lc-13b-repobench-p")
    assert headline.prediction.tokens_per_s == pytest.approx(96.96, rel=0.2)


# ---- ViSpec -----------------------------------------------------------------------------------

def test_a_request_without_images_is_the_text_model_drafted_by_a_head() -> None:
    case = _vispec(images=0)  # decoding alone, as head prices
    ours, theirs = vispec.predict(case), head.predict(dataclasses.replace(case, system="head",
                                                                         options={}))
    assert ours.step_s == pytest.approx(theirs.step_s, rel=EXACT)
    assert ours.baseline_s == pytest.approx(theirs.baseline_s, rel=EXACT)
    assert ours.parts == pytest.approx(theirs.parts, rel=EXACT)
    assert ours.speedup == pytest.approx(theirs.speedup, rel=EXACT)

    c, spec = vispec.costs(case), get_model("llava-1.6-7b")
    text = CostModel(load_profile("a100"), spec, runtime="eager")
    assert c.prompt_tokens == 0
    assert c.target.forward_time(1, 31, 3000) == pytest.approx(text.forward_time(1, 31, 3000),
                                                               rel=EXACT)
    _ops_equal(c.drafter.ops(1, 8, 300), head_model(case, spec).ops(1, 8, 300))


def test_images_lengthen_the_targets_context_and_only_the_compressed_ones_the_heads() -> None:
    case = _vispec(images=2, options={"query_tokens": 3})
    spec, c, p = get_model("llava-1.6-7b"), vispec.costs(case), vispec.predict(case)
    assert c.prompt_tokens == 2 * spec.image_tokens == 5760
    target_at = round(case.decode_context + 5760)
    draft_at = round(case.decode_context + 2 * 2)
    levels = sum(float(c.drafter.forward_time(1, w, draft_at)) for w in (1, 8, 8, 8))
    assert p.parts["draft"] == pytest.approx(levels, rel=EXACT)
    assert p.parts["verify"] == pytest.approx(c.target.verify_time(31, target_at), rel=EXACT)
    assert p.baseline_s == pytest.approx(c.target.forward_time(1, 1, target_at), rel=EXACT)
    assert p.tokens_per_step == pytest.approx(3.98)
    assert p.step_s == pytest.approx(p.parts["draft"] + p.parts["verify"]
                                     + p.parts["bookkeeping"], rel=EXACT)
    encoder = CostModel(load_profile("a100"), get_model("clip-vit-l-336"), runtime="eager")
    assert p.parts["vision_encoder"] == pytest.approx(encoder.forward_time(10, 576, 0),
                                                      rel=EXACT)
    names = [op.op for op in c.drafter.ops(1, 8, draft_at)]
    assert names.count("img_fc") == 1 and names.count("head_fc") == 1


def test_a_timed_prefill_is_spread_over_the_requests_new_tokens() -> None:
    plain_case = _vispec()
    timed_case = _vispec(timed_prefill=True)  # the paper's scripts time whole requests
    plain, timed = predict_case(plain_case), predict_case(timed_case)
    c, spec = vispec.costs(timed_case), get_model("llava-1.6-7b")
    prompt = float(c.target.forward_time(1, 64 + spec.image_tokens, 0))
    shared = timed.parts["vision_encoder"] + prompt
    ours = shared + float(c.drafter.forward_time(1, 64 + 1, 0))
    assert vispec.SYSTEM.prefill_s(timed_case) == pytest.approx((shared, ours), rel=EXACT)
    assert timed.parts["prefill"] == pytest.approx(ours * 3.98 / 200, rel=EXACT)
    assert timed.step_s == pytest.approx(plain.step_s + ours * 3.98 / 200, rel=EXACT)
    assert timed.baseline_s == pytest.approx(plain.baseline_s + shared / 200, rel=EXACT)
    assert 1.0 < timed.speedup < plain.speedup


@pytest.mark.parametrize("fields, message", [
    ({"options": {"query_tokens": 0}}, "query_tokens = 0 must be at least 1"),
    ({"target": "vicuna-7b"}, "has no vision encoder"),
    ({"tree": ()}, "needs a tree"),
])
def test_vispec_rejects_bad_cases(fields: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        vispec.predict(_vispec(**fields))


def test_vispec_rows_within_15_percent_at_the_median() -> None:
    rows = {r.case.name: r for r in reproduce(PAPERS / "vispec.toml")}
    assert np.median([abs(r.rel_err) for r in rows.values()]) < 0.15
    assert all(r.case.tokens_per_step == r.case.tau + 1 for r in rows.values())
