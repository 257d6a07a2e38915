"""profile-hw: a tiny measured profile loads and prices, the fit recovers known terms, bad input
is one line and exit 2."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import Cli

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.profile import DATA_DIR, PROFILE_DIR_ENV, with_runtime
from specscope.hw_profiles.runtime import BATCH_FIELDS, FIELDS
from specscope.models import get_model
from specscope.profiling.calibrate import Grid, base_profile, fitted_values, profile_hw
from specscope.profiling.measure import Point
from specscope.profiling.profile_file import Measurements, profile_toml
from specscope.profiling.runtime_fit import (
    PREFILL_FIELDS,
    Fit,
    fit_runtime,
    predict,
    split_held_out,
)

TINY = Grid(models=("tiny-code-draft", "tiny-code"), ns=(1, 2, 4), contexts=(16, 48),
            static_ns=(1,), static_contexts=(16,), prefill=(8, 24), draft_model="tiny-code-draft",
            draft_levels=2, repeats=2, wake_gaps=(0.02,), serve_batches=(1, 2))
"""A grid that measures in a few seconds on two cores."""


@pytest.fixture
def profile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user profile directory."""
    folder = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(folder))
    return folder


def test_tiny_run_writes_a_profile_that_load_profile_finds_and_cost_model_prices(
        profile_dir: Path) -> None:
    threads = torch.get_num_threads()
    seen: list[tuple[int, int]] = []
    try:
        result = profile_hw("tiny-box", runtimes=["eager"], grid=TINY,
                            progress=lambda done, total, _: seen.append((done, total)))
    finally:
        torch.set_num_threads(threads)
    assert result.path == profile_dir / "tiny-box.toml"
    assert seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == sorted(d for d, _ in seen)
    hw = load_profile("tiny-box")
    assert (hw.name, hw.kind, hw.default_runtime, list(hw.runtimes)) == (
        "tiny-box", "cpu", "eager", ["eager"])
    assert hw.runtimes["eager"].origin.startswith("fitted by profile-hw on ")
    assert hw.peak_flops["bf16"] > 1e9 and hw.bandwidth > 1e8
    assert set(hw.loop.drafter) == {"ngram", "suffix", "recycle", "goose"}
    assert all(0 < s < 0.1 for s in hw.loop.drafter.values())
    assert 0 < hw.loop.step < 0.1 and 0 <= hw.loop.level < 0.1
    # the sampled rule works on probabilities: it costs more host time than the greedy one
    assert hw.loop.sampled_verify > hw.loop.verify > 0
    assert 0 <= hw.loop.draft_cold < 0.01 and 0 <= hw.loop.verify_cold < 0.01
    assert 0 <= hw.loop.node < 0.01 and 0 <= hw.loop.dyspec_node < 0.01
    # SpecDec++'s stop check (features and the predictor, every drafted token) costs host time
    assert 0 < hw.loop.stop_rule < 0.01
    # the batching server's own terms, measured in it: non-negative, and eager pads rows
    assert 0 <= hw.loop.serve_step < 0.01 and 0 <= hw.loop.serve_row < 0.01
    assert hw.loop.spec_row is not None and 0 <= hw.loop.spec_row < 0.01
    # each row sharing a batched draft level: measured (the grid serves two rows) and written
    assert 0 <= hw.loop.shared_row < 0.01
    assert "shared_row_us = " in result.path.read_text(encoding="utf-8")
    assert hw.loop.pads_context and hw.loop.level_per_row
    # the first forward after each idle gap of the grid
    assert hw.wake.idle_s == TINY.wake_gaps and all(0 <= e < 1 for e in hw.wake.extra_s)
    # every step and prompt measured is a [[measured]] table of the eager runtime
    contexts = {(m.model, m.context) for m in hw.measured}
    assert contexts == {(m, c) for m in TINY.models for c in (0, *TINY.contexts)}
    assert all(m.runtime == "eager" and not m.priced for m in hw.measured)
    # the tables are the fit's data: steps are priced from the fit
    spec = get_model("tiny-code")
    step = CostModel(hw, spec, runtime="eager").forward(1, 2, 48)
    assert step.source == "roofline" and step.time_s > 0
    text = result.path.read_text()
    doc = tomllib.loads(text)
    assert doc["provenance"]["threads"] == 1 and doc["provenance"]["torch"] == torch.__version__
    assert set(doc["fit"]["eager"]) >= {"heldout_median_rel_err", "heldout_max_rel_err"}
    fit = result.fits["eager"]
    assert fit.held_out + fit.points == len(result.measurements.points) > 2 * fit.held_out > 0
    # the fitted formula alone (tables dropped) is close to what it was fitted on
    bare = dataclasses.replace(hw, measured=())
    assert CostModel(bare, spec, runtime="eager").forward(1, 2, 48).source == "roofline"
    # every value written but not measured names its origin in [assumed]
    assert unmeasured(doc, result.fits) == set(doc["assumed"]) == set(hw.assumed)
    assert all(text.startswith("assumed: ") for text in hw.assumed.values())
    assert hw.assumed["interconnect.link_gbs"].startswith("assumed: copied from the shipped "
                                                          "cpu-2core profile")
    assert hw.assumed["runtime.eager.step_us"].startswith(
        "assumed: copied from the shipped cpu-2core profile's eager runtime")
    with pytest.raises(InputError, match="int8_tops assumed: not measured by profile-hw"):
        CostModel(hw, spec, act_bits=8)


MEASURED = {"compute": {"bf16_tflops"}, "memory": {"capacity_gb", "bandwidth_gbs"},
            "interconnect": set(), "dequant": set()}
"""The values of the priced fixed sections profile-hw measures (the rest it copies or leaves 0)."""


def unmeasured(doc: dict, fits: dict[str, Fit]) -> set[str]:
    """The keys of the values a written profile states that its run did not measure: those of
    the fixed sections outside `MEASURED` and each runtime's fields its fit did not vary."""
    keys = {f"{section}.{key}" for section, measured in MEASURED.items()
            for key in doc[section] if key not in measured}
    for name, fit in fits.items():
        batched = BATCH_FIELDS if fit.batched is not None else ()
        keys |= {f"runtime.{name}.{field}" for field in FIELDS
                 if field not in (*fit.fitted, *batched)}
    return keys


def test_a_gpu_profile_marks_the_h100_interconnect_it_copies_and_its_unmeasured_peaks(
        tmp_path: Path) -> None:
    m = Measurements("cuda", 1, 700.0, 2500.0, 80.0, provenance={
        "device": "NVIDIA Test GPU", "date": "2026-11-28", "torch": "2", "driver": ""})
    hw = base_profile("gpu-box", m, ["eager", "graph"])
    fits = {}
    for name, fitted in (("eager", ("host_step_us", "prefill_host_step_us")),
                         ("graph", ("step_us",))):
        fit = Fit(name, hw.runtimes[name].values(), fitted, 9, 3, 0.05, 0.1, 0.02)
        carried = PREFILL_FIELDS if name == "graph" else ()
        hw = dataclasses.replace(hw, assumed=fitted_values(hw, name, fit, carried))
        fits[name] = fit
    path = tmp_path / "gpu-box.toml"
    path.write_text(profile_toml(hw, m, fits, "test", 1.0), encoding="utf-8")
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    loaded = load_profile(path)
    assert unmeasured(doc, fits) == set(loaded.assumed) == set(hw.assumed)
    for key in ("link_gbs", "max_tp", "allreduce_latency_us", "shard_lm_head"):
        assert loaded.assumed[f"interconnect.{key}"].startswith(
            "assumed: copied from the shipped h100 profile")
    assert (loaded.link_bandwidth, loaded.max_tp) == (450e9, 8)
    # int8 and fp8 are 0, marked not measured: 8-bit activations are refused with that line
    assert loaded.peak_flops["int8"] == loaded.peak_flops["fp8"] == 0
    assert "not measured by profile-hw" in loaded.assumed["compute.fp8_tflops"]
    with pytest.raises(InputError, match="int8_tops assumed: not measured"):
        CostModel(loaded, get_model("llama-68m"), act_bits=8)
    # graph's prompt fields are eager's fit (one of them fitted there), the rest h100's graph
    assert loaded.assumed["runtime.graph.prefill_host_layer_us"] == (
        "assumed: copied from the shipped h100 profile's eager runtime (not fitted)")
    assert loaded.assumed["runtime.graph.prefill_host_step_us"].startswith(
        "assumed: eager's fit on this machine")
    assert loaded.assumed["runtime.graph.host_step_us"] == (
        "assumed: copied from the shipped h100 profile's graph runtime (not fitted)")
    assert "runtime.eager.host_step_us" not in loaded.assumed


@pytest.mark.parametrize(("entry", "error"), [
    ('"interconnect.nvlink" = "assumed: x"', "names no value the file states"),
    ('"runtime.eager.step_us" = "from h100"', "must read \"assumed: <its origin>\""),
])
def test_an_assumed_entry_names_a_stated_value_and_says_assumed(tmp_path: Path, entry: str,
                                                                error: str) -> None:
    text = (DATA_DIR / "cpu-2core.toml").read_text(encoding="utf-8")
    path = tmp_path / "box.toml"
    path.write_text(text.replace("[compute]", f"[assumed]\n{entry}\n\n[compute]", 1),
                    encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(error)):
        load_profile(path)


TRUE = {"host_step_us": 180.0, "host_layer_us": 55.0, "gemv_memory_eff": 0.45,
        "gemm_compute_eff": 0.35}
"""Runtime terms the synthetic measurements are generated with."""


def synthetic(hw_true, models: tuple[str, ...]) -> tuple[list[Point], dict]:
    """Points priced by `CostModel` itself on `hw_true`: decode grid and prompts."""
    specs = {m: get_model(m) for m in models}
    grid = [(m, c, n) for m in models for c in (64, 256, 1024) for n in (1, 2, 4, 8, 16, 32, 64)]
    grid += [(m, 0, n) for m in models for n in (32, 128, 512)]
    points = [Point(m, "eager", c, n, 1.0) for m, c, n in grid]
    times = predict(hw_true, "eager", points, specs)
    return [dataclasses.replace(p, time_s=float(t)) for p, t in zip(points, times, strict=True)
            ], specs


def test_fit_recovers_the_terms_cost_model_generated_the_measurements_with() -> None:
    # blend 1 (memory and compute times add) keeps every term visible in the times; under a max
    # a term hidden behind a larger one is not identifiable
    prior = with_runtime(dataclasses.replace(load_profile(DATA_DIR / "cpu-2core.toml"),
                                             measured=()), "eager", blend=1.0)
    truth = with_runtime(prior, "eager", **TRUE)
    points, specs = synthetic(truth, ("tiny-code-draft", "tiny-code", "llama-68m",
                                      "llama-3.2-1b"))
    fit = fit_runtime(prior, "eager", points, specs, fields=tuple(TRUE), prior_weight=0.0)
    for key, value in TRUE.items():
        assert fit.values[key] == pytest.approx(value, rel=0.03), key
    assert fit.heldout_max_rel_err < 0.01
    # a fit of every field from the priors still reproduces the points it did not see
    full = fit_runtime(prior, "eager", points, specs)
    assert full.heldout_median_rel_err < 0.02
    assert {"prefill_compute_eff", "blend"} <= set(full.fitted)
    assert "step_us" not in full.fitted  # on a CPU the host terms carry the fixed costs


def test_a_wrong_fit_is_seen_on_held_out_points() -> None:
    prior = dataclasses.replace(load_profile(DATA_DIR / "cpu-2core.toml"), measured=())
    points, specs = synthetic(with_runtime(prior, "eager", **TRUE), ("tiny-code", "llama-68m"))
    train, held = split_held_out(points)
    assert len(held) == len(points) // 4 and {p.new_tokens for p in train} == {
        p.new_tokens for p in points}  # every n stays in the fit
    noisy = train + [dataclasses.replace(p, time_s=p.time_s * 3.0) for p in held]
    fit = fit_runtime(prior, "eager", noisy, specs, fields=tuple(TRUE))
    assert fit.heldout_median_rel_err == pytest.approx(2 / 3, rel=0.05)
    assert np.isfinite(fit.fit_median_rel_err) and fit.fit_median_rel_err < 0.01






BAD = [
    (["--name", "box", "--runtime", "turbo"], "turbo"),
    (["--name", "box", "--runtime", "eager,graph"], "graph"),
    (["--name", "../x"], "../x"),
    (["--name", "box", "--device", "tpu"], "--device"),
    (["--name", "box", "--threads", "0"], "--threads"),
]
if not torch.cuda.is_available():
    BAD.append((["--name", "box", "--device", "cuda"], "cuda"))


@pytest.mark.parametrize(("args", "needle"), BAD)
def test_bad_input_is_one_line_exit_2_and_nothing_written(cli: Cli, profile_dir: Path,
                                                          tmp_path: Path, args: list[str],
                                                          needle: str) -> None:
    out_file = tmp_path / "p.toml"
    code, _, err = cli("profile-hw", *args, "-o", str(out_file))
    assert code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out_file.exists() and not profile_dir.exists()


def test_profile_hw_measures_the_gpu_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from specscope.profiling.calibrate import resolve_device

    assert resolve_device("cpu") == "cpu" and resolve_device("cuda") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
