"""benchmarks/research_loops.py's pure parts (benchmarks/loop_fit.py): the step clock, the term
fit and the tables, on research_loops' own configurations (no EAGLE or Medusa needed: they live
in .venv-research)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up; research_loops imports it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rl():
    """loop_fit's names with research_loops' configurations beside them."""
    fit, loops = _load("loop_fit"), _load("research_loops")
    return SimpleNamespace(**vars(fit), eagle_configs=loops.eagle_configs,
                           medusa_configs=loops.medusa_configs)


def accepted(config):
    """Tokens accepted per step as a run might measure them: none with random weights, about
    half the depth when the configuration agrees."""
    return config.args["depth"] / 2 if config.args["agree"] else 0.0


def eagle_records(rl, terms_by_repeat, noise=0.0):
    """Synthetic EAGLE-2 records whose host µs per step is x · terms (+ noise) per repeat."""
    rng = np.random.default_rng(0)
    out = []
    for repeat, terms in enumerate(terms_by_repeat):
        for config in rl.eagle_configs(quick=False):
            x = (*config.x, accepted(config))
            host_us = float(np.dot(x, terms)) + noise * rng.standard_normal()
            out.append(rl.Record(config.loop, config.name, repeat, x, 40, x[-1], 3e-3,
                                 host_us * 1e-6))
    return out


def test_the_fit_recovers_the_terms_the_records_were_made_of(rl):
    truth = (400.0, 120.0, 9.0, 6.5, 30.0)
    terms, residual = rl.fit_terms(eagle_records(rl, [truth]), 5)
    assert terms == pytest.approx(truth, rel=1e-9)
    assert residual == pytest.approx(0.0, abs=1e-6)


def test_the_fit_under_noise_stays_near_the_terms_and_reports_the_noise_as_residual(rl):
    truth = (400.0, 120.0, 9.0, 6.5, 30.0)
    records = eagle_records(rl, [truth], noise=2.0)
    terms, residual = rl.fit_terms(records, 5)
    x = np.array([r.x for r in records])
    y = np.array([r.host_s * 1e6 for r in records])
    assert residual == pytest.approx(np.sqrt(np.mean((x @ terms - y) ** 2)))
    assert 0.5 < residual < 4.0
    assert terms[1] == pytest.approx(truth[1], abs=10)


def test_fit_repeats_reports_median_and_range_over_repeats(rl):
    repeats = [(400.0, 100.0, 9.0, 6.0, 20.0), (420.0, 110.0, 8.0, 7.0, 30.0),
               (380.0, 130.0, 10.0, 5.0, 25.0)]
    fit = rl.fit_repeats(eagle_records(rl, repeats), "EAGLE-2")
    assert fit.median == pytest.approx(np.median(repeats, axis=0))
    assert fit.low == pytest.approx(np.min(repeats, axis=0))
    assert fit.high == pytest.approx(np.max(repeats, axis=0))
    assert fit.configs == len(rl.eagle_configs(quick=False))
    x = (*rl.eagle_configs(quick=False)[-1].x, 2.0)
    assert fit.predict_us(x) == pytest.approx(np.dot(fit.median, x))


def test_too_few_configurations_for_the_terms_are_refused(rl):
    records = eagle_records(rl, [(1.0, 2.0, 3.0, 4.0, 5.0)])[:4]
    with pytest.raises(ValueError, match="cannot fit 5 terms"):
        rl.fit_terms(records, 5)


def test_every_quick_and_full_grid_determines_its_terms_once_agreeing_runs_accept(rl):
    for quick in (True, False):
        for configs, loop in ((rl.eagle_configs(quick), "EAGLE-2"),
                              (rl.medusa_configs(quick), "Medusa")):
            x = np.array([(*c.x, 1.0 if c.args["agree"] else 0.0) for c in configs])
            assert np.linalg.matrix_rank(x) == len(rl.TERMS[loop])


def test_the_clock_splits_each_step_between_verifications_into_forwards_and_host(rl):
    clock = rl.ForwardClock()
    # prefill at 0, verifications at 10, 20, 30, 40; draft forwards inside the steps
    clock.calls = [("target", 0.0, 5.0), ("target", 10.0, 12.0), ("draft", 13.0, 14.0),
                   ("draft", 15.0, 16.0), ("target", 20.0, 22.0), ("draft", 24.0, 25.0),
                   ("target", 30.0, 32.0), ("target", 40.0, 42.0)]
    steps, forward, host, calls = clock.steps()
    # steps [10, 20), [20, 30), [30, 40): forwards 2+1+1, 2+1, 2; host 6, 7, 8 (medians)
    assert steps == 3
    assert forward == pytest.approx(3)
    assert host == pytest.approx(7)
    assert calls == {"target": 1.0, "draft": 1.0}


def test_the_clock_wraps_a_forward_and_keeps_its_output(rl):
    class Doubler:
        def forward(self, x):
            return 2 * x

    module, clock = Doubler(), rl.ForwardClock()
    clock.wrap(module, "draft")
    assert module.forward(3) == 6
    assert [kind for kind, *_ in clock.calls] == ["draft"]
    assert clock.calls[0][1] <= clock.calls[0][2]


def test_the_tables_show_every_term_its_ratio_to_the_layer_and_every_configuration(rl):
    records = eagle_records(rl, [(400.0, 100.0, 9.0, 6.0, 20.0), (420.0, 110.0, 8.0, 7.0, 30.0)])
    terms, per = rl.tables(records, {"EAGLE-2": 200.0}, 250.0,
                           {"EAGLE-2/baseline_token_us": (30.0, 25.0, 35.0)}, "terms")
    console = Console(width=200, record=True)
    console.print(terms)
    console.print(per)
    text = console.export_text()
    for name in rl.TERMS["EAGLE-2"]:
        assert name in text
    assert "410.0" in text and "400.0–420.0" in text  # step's median and range
    assert "2.05" in text and "1.64" in text  # step over its layer and over specscope's
    assert "baseline_token_us" in text and "0.15" in text
    for config in rl.eagle_configs(quick=False):
        assert config.name in text
