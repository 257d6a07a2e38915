"""profile-hw's batched steps: measured through the batched target, fitted (per-sequence host
terms) through `CostModel`; a profile without those terms prices as before; the simulator's
batch pricing reads the fitted terms."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.profile import DATA_DIR, HardwareProfile, with_runtime
from specscope.hw_profiles.runtime import BATCH_FIELDS
from specscope.models import get_model
from specscope.profiling import calibrate
from specscope.profiling.calibrate import Grid, base_profile, profile_hw
from specscope.profiling.measure import Point
from specscope.profiling.runtime_fit import fit_runtime, predict
from specscope.simulator.policies.base import Speculation
from specscope.simulator.pricing import BatchPricer
from specscope.tree import Tree

TINY_BATCHED = Grid(models=("tiny-code-draft", "tiny-code"), ns=(1, 2, 4), contexts=(16, 48),
                    static_ns=(1,), static_contexts=(16,), prefill=(8, 24),
                    draft_model="tiny-code-draft", draft_levels=2, repeats=2, batches=(2, 4),
                    batch_ns=(1, 2, 3, 4), batch_contexts=(16,), wake_gaps=(0.02,),
                    serve_batches=(1, 2))
"""tests/test_calibrate.py's tiny grid with a few batched steps."""
SEQ = {"host_seq_us": 40.0, "host_layer_seq_us": 15.0}
"""Per-sequence terms the synthetic batched measurements are generated with."""


def cpu_prior() -> HardwareProfile:
    """The shipped CPU profile, without measured tables, its eager runtime's batch terms 0."""
    hw = dataclasses.replace(load_profile(DATA_DIR / "cpu-2core.toml"), measured=())
    return with_runtime(hw, "eager", **dict.fromkeys(BATCH_FIELDS, 0.0))


@pytest.mark.slow
def test_profile_hw_measures_batched_steps_and_fits_them_after_batch_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the decode loop's host costs are test_calibrate's: left out here (the prior's stay)
    monkeypatch.setattr(calibrate, "host_costs", lambda *_: None)
    threads = torch.get_num_threads()
    try:
        result = profile_hw("tiny-batched", runtimes=["eager"], grid=TINY_BATCHED,
                            output=tmp_path / "tiny-batched.toml")
    finally:
        torch.set_num_threads(threads)
    points = result.measurements.points
    batched = [p for p in points if p.batch > 1]
    assert {(p.model, p.batch, p.new_tokens) for p in batched} == {
        (m, b, n) for m in TINY_BATCHED.models for b in (2, 4) for n in (1, 2, 3, 4)}
    assert all(p.context == 16 and p.runtime == "eager" and p.time_s > 0 for p in batched)
    fit = result.fits["eager"]
    assert fit.batched is not None and fit.batched.fitted == BATCH_FIELDS
    assert fit.batched.points + fit.batched.held_out == len(batched)
    assert np.isfinite(fit.batched.heldout_median_rel_err)
    # the single-sequence fields are those of a fit of the batch-1 points alone
    prior = base_profile("tiny-batched", result.measurements, ["eager"])
    single = fit_runtime(prior, "eager", [p for p in points if p.batch == 1], specs_of(points))
    for key in single.fitted:
        assert fit.values[key] == pytest.approx(single.values[key], rel=1e-9), key
    doc = tomllib.loads(result.path.read_text())
    assert {t["batch"] for t in doc["measured"]} == {1, 2, 4}
    assert doc["fit"]["eager"]["batched_held_out"] == fit.batched.held_out
    hw = load_profile(result.path)
    for key in BATCH_FIELDS:
        assert hw.runtimes["eager"].values()[key] == pytest.approx(fit.values[key], rel=1e-5)
    # the batched points are predicted by the loaded profile's CostModel (the fit, no lookup)
    assert np.allclose(predict(hw, "eager", batched, specs_of(points)),
                       predict(with_runtime(hw, "eager", **fit.values), "eager", batched,
                               specs_of(points)), rtol=1e-5)


def specs_of(points: list[Point]) -> dict:
    """The catalogue specs of the points' models."""
    return {p.model: get_model(p.model) for p in points}


def test_fit_recovers_the_per_sequence_terms_and_keeps_batch_one() -> None:
    prior = cpu_prior()
    truth = with_runtime(prior, "eager", **SEQ)
    specs = {m: get_model(m) for m in ("tiny-code-draft", "tiny-code", "llama-68m")}
    points = [Point(m, "eager", c, n, 1.0, b) for m in specs for b in (1, 2, 4, 8)
              for c in (64, 256) for n in (1, 2, 4, 8)]
    times = predict(truth, "eager", points, specs)
    points = [dataclasses.replace(p, time_s=float(t)) for p, t in zip(points, times, strict=True)]
    fit = fit_runtime(prior, "eager", points, specs, fields=("host_layer_us",),
                      prior_weight=0.0)
    for key, value in SEQ.items():
        assert fit.values[key] == pytest.approx(value, rel=0.02), key
    assert fit.batched is not None and fit.batched.heldout_max_rel_err < 1e-3
    alone = fit_runtime(prior, "eager", [p for p in points if p.batch == 1], specs,
                        fields=("host_layer_us",), prior_weight=0.0)
    assert fit.values["host_layer_us"] == alone.values["host_layer_us"]
    assert alone.batched is None


def test_a_profile_without_batch_terms_loads_and_prices_batches_as_before(tmp_path: Path
                                                                          ) -> None:
    text = (DATA_DIR / "cpu-2core.toml").read_text()
    old = "\n".join(line for line in text.splitlines()
                    if not line.startswith(("host_seq_us", "host_layer_seq_us")))
    path = tmp_path / "old.toml"
    path.write_text(old)
    hw = load_profile(path)
    assert all(r.host_seq_s == 0 and r.host_layer_seq_s == 0 for r in hw.runtimes.values())
    cm = CostModel(hw, get_model("tiny-code"), runtime="eager")
    for batch in (1, 2, 8):
        _, terms = cm.roofline_terms(batch, 4, 128)
        assert float(terms["host"]) == float(cm.host_time(128))  # no per-sequence term
    # with the terms, each further sequence adds exactly its host work; batch 1 is unchanged
    seq = CostModel(with_runtime(hw, "eager", **SEQ), get_model("tiny-code"), runtime="eager")
    per_seq = (SEQ["host_seq_us"] + 4 * SEQ["host_layer_seq_us"]) * 1e-6
    assert seq.forward_time(1, 4, 128) == cm.forward_time(1, 4, 128)
    assert seq.forward_time(8, 4, 128) - cm.forward_time(8, 4, 128) == pytest.approx(7 * per_seq)


def test_the_simulators_batch_pricing_reads_the_fitted_terms() -> None:
    prior = cpu_prior()
    fitted = with_runtime(prior, "eager", **SEQ)
    spec = get_model("tiny-code")
    tree = Tree.from_parents([-1, 0, 0, 1])
    specs = [Speculation.of(tree)] * 4
    contexts = [100, 120, 140, 160]
    without = BatchPricer(CostModel(prior, spec), None, "ngram")
    with_seq = BatchPricer(CostModel(fitted, spec), None, "ngram")
    per_seq = (SEQ["host_seq_us"] + spec.n_layers * SEQ["host_layer_seq_us"]) * 1e-6
    assert with_seq.parts(contexts, specs).verify_s - without.parts(contexts, specs).verify_s \
        == pytest.approx(3 * per_seq, rel=1e-6)
    assert with_seq.parts(contexts[:1], specs[:1]).verify_s == pytest.approx(
        without.parts(contexts[:1], specs[:1]).verify_s, rel=1e-12)
    # autoregressive steps and batched prompts pay it too: one forward of several sequences
    plain = [Speculation.none()] * 4
    assert with_seq.step_s(contexts, plain) - without.step_s(contexts, plain) == pytest.approx(
        3 * per_seq, rel=1e-6)
    assert with_seq.prefill_s([32, 32]) - without.prefill_s([32, 32]) == pytest.approx(
        per_seq, rel=1e-6)
