"""What the simulator prices of the batching server and the machine under it: the server's own
terms per step and per plain row, padded attention reads, the wake-up penalty after a gap
(`hw_profiles/wake.py`), and the machine-drift probe's reference (`profiling/drift.py`)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.executor.runtime import Runtime
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.profile import DATA_DIR
from specscope.hw_profiles.wake import Wake
from specscope.models import get_model
from specscope.profiling import drift
from specscope.profiling.measure import Point
from specscope.simulator.policies.base import Speculation
from specscope.simulator.pricing import BatchPricer
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree


def _pricer(**loop: object) -> BatchPricer:
    hw = load_profile("cpu-2core")
    hw = dataclasses.replace(hw, loop=dataclasses.replace(hw.loop, **loop))
    return BatchPricer(CostModel(hw, get_model("tiny-code"), runtime="eager"), None, "ngram")


def test_the_server_terms_are_paid_per_step_and_per_plain_row() -> None:
    bare = _pricer(serve_step=0.0, serve_row=0.0)
    served = _pricer(serve_step=1e-3, serve_row=2e-4)
    chain, plain = Speculation.of(Tree.chain(3, "ngram")), Speculation.none()
    for specs in ([plain], [plain] * 3, [chain, plain, plain], [chain] * 2):
        contexts = [80] * len(specs)
        extra = served.step_s(contexts, specs) - bare.step_s(contexts, specs)
        plain_rows = sum(s is plain for s in specs)
        assert extra == pytest.approx(1e-3 + plain_rows * 2e-4, rel=1e-9)


def test_the_servers_own_bookkeeping_replaces_the_loops_per_speculating_row() -> None:
    """`spec_row` (measured in the server) is what each speculating row pays in place of the
    decode loop's `step`; absent, the row pays `step`; plain rows pay neither."""
    loop_step = load_profile("cpu-2core").loop.step
    unmeasured, measured = _pricer(spec_row=None), _pricer(spec_row=loop_step + 3e-4)
    chain, plain = Speculation.of(Tree.chain(3, "ngram")), Speculation.none()
    for specs in ([chain], [chain] * 3, [chain, plain, plain], [plain] * 2):
        contexts = [80] * len(specs)
        extra = measured.step_s(contexts, specs) - unmeasured.step_s(contexts, specs)
        assert extra == pytest.approx(sum(s is chain for s in specs) * 3e-4, rel=1e-9, abs=1e-15)
    assert _pricer(spec_row=None).parts([80], [chain]).bookkeeping_s == pytest.approx(
        loop_step + _pricer().target.hw.loop.serve_step, rel=1e-12)


def test_spec_row_is_read_when_present_and_none_when_absent(tmp_path: Path) -> None:
    text = (DATA_DIR / "cpu-2core.toml").read_text(encoding="utf-8")
    without = re.sub(r"(?m)^spec_row_us = .*\n", "", text)
    (tmp_path / "without.toml").write_text(without, encoding="utf-8")
    (tmp_path / "with.toml").write_text(re.sub(r"(?m)^\[speculation\].*\n",
                                               lambda m: m.group(0) + "spec_row_us = 250\n",
                                               without), encoding="utf-8")
    assert load_profile(str(tmp_path / "without.toml")).loop.spec_row is None
    assert load_profile(str(tmp_path / "with.toml")).loop.spec_row == pytest.approx(250e-6)


def test_choosing_is_paid_per_step_by_a_choosing_policy_only(tmp_path: Path) -> None:
    """SmartSpec prices every length each step; the simulator charges what that costs the real
    server (`choose_step` + `choose_row` per running sequence) to its steps, and no other
    policy's."""
    priced = _pricer(choose_step=1e-3, choose_row=2e-4)
    assert priced.choose_s(3) == pytest.approx(1e-3 + 3 * 2e-4)

    def tpot(policy: str, **loop: float) -> float:
        text = (DATA_DIR / "cpu-2core.toml").read_text(encoding="utf-8")
        text = re.sub(r"(?m)^choose_(step|row)_us = .*\n", "", text)
        keys = "".join(f"{key}_us = {value * 1e6}\n" for key, value in loop.items())
        path = tmp_path / f"{policy}-{loop['choose_step']}.toml"
        path.write_text(re.sub(r"(?m)^\[speculation\].*\n", lambda m: m.group(0) + keys, text),
                        encoding="utf-8")
        return run_simulation(SimulateRequest(
            deployment=deployment(str(path), target="tiny-code", drafter="ngram", max_batch=4),
            policy=policy, acceptance=(0.5,),
            tree=Tree.chain(3, "ngram") if policy == "static" else None, rate=2.0, requests=16,
            prompt_len="64", output_len="16", seed=3)).summary["mean_tpot_ms"]

    # every step pays 2 ms more and yields at most 4 tokens (a chain of 3 and the bonus)
    assert tpot("smartspec", choose_step=2e-3, choose_row=0.0) > tpot(
        "smartspec", choose_step=0.0, choose_row=0.0) + 0.5
    assert tpot("static", choose_step=2e-3, choose_row=0.0) == pytest.approx(
        tpot("static", choose_step=0.0, choose_row=0.0))


def test_a_padding_loop_prices_every_row_at_the_longest_context() -> None:
    padded, paged = _pricer(pads_context=True), _pricer(pads_context=False)
    specs = [Speculation.of(Tree.chain(3, "ngram"))] * 2
    assert padded.step_s([300, 300], specs) == pytest.approx(paged.step_s([300, 300], specs))
    assert padded.step_s([50, 300], specs) == pytest.approx(paged.step_s([300, 300], specs))
    assert paged.step_s([50, 300], specs) == pytest.approx(paged.step_s([175, 175], specs))
    assert paged.step_s([50, 300], specs) < padded.step_s([50, 300], specs)


def test_wake_interpolates_from_zero_and_holds_past_the_last_gap() -> None:
    wake = Wake((0.1, 0.4), (0.01, 0.04))
    assert [wake.extra(g) for g in (0.0, -1.0, 0.05, 0.1, 0.25, 0.4, 9.0)] == pytest.approx(
        [0.0, 0.0, 0.005, 0.01, 0.025, 0.04, 0.04])
    assert Wake().extra(5.0) == 0.0
    assert "[idle]" in "\n".join(wake.toml()) and Wake().toml() == []


def _with_idle(tmp_path: Path, section: str) -> Path:
    text = (DATA_DIR / "cpu-2core.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[idle\][^\n]*\n(?:[^\n]+\n)*", "", text) + "\n" + section
    path = tmp_path / "box.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("section", "words"), [
    ("[idle]\nseconds = [0.1, 0.1]\nextra_ms = [1, 2]\n", "increasing"),
    ("[idle]\nseconds = [0.1]\nextra_ms = [1, 2]\n", "differ in length"),
    ("[idle]\nseconds = [0.1]\nextra_ms = [-1]\n", "extra_ms"),
    ("[idle]\nseconds = [0.1]\nextra_ms = [nan]\n", "extra_ms"),
    ("[idle]\nseconds = []\nextra_ms = []\n", "seconds"),
])
def test_a_bad_idle_section_is_one_error_naming_it(tmp_path: Path, section: str,
                                                   words: str) -> None:
    with pytest.raises(InputError, match=r"\[idle\].*" + words):
        load_profile(_with_idle(tmp_path, section))


def _simulate(hw: str | Path, rate: float) -> dict:
    return run_simulation(SimulateRequest(
        deployment=deployment(str(hw), target="tiny-code", drafter=None, max_batch=4),
        policy="none", rate=rate, requests=24, prompt_len="64", output_len="16", seed=3)).summary


def test_a_prefill_after_a_gap_pays_the_wake_penalty(tmp_path: Path) -> None:
    """At a low rate most requests arrive to a replica idle for seconds: the prefill pays the
    penalty of the gap since the last prefill (none under 0.1 s, 50 ms past 0.2 s); a step
    follows a forward within milliseconds and pays none."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    table = "[idle]\nseconds = [0.1, 0.2, 100]\nextra_ms = [0, 50, 50]\n"
    cold = _simulate(_with_idle(tmp_path / "a", table), 0.5)
    warm = _simulate(_with_idle(tmp_path / "b", ""), 0.5)
    assert 40 < cold["mean_ttft_ms"] - warm["mean_ttft_ms"] <= 50 + 1e-6
    assert cold["mean_tpot_ms"] == pytest.approx(warm["mean_tpot_ms"], rel=1e-6)


def test_the_drift_probe_retimes_the_profiles_own_small_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hw = load_profile("cpu-2core")
    tables = {(t.model, t.batch, t.context): t for t in hw.measured
              if t.runtime == "eager" and t.context > 0}
    asked: list[tuple[str, int, int, int]] = []

    def now(spec, runtime, contexts, batches, ns, factor):  # each table's points × factor
        out = []
        for b in batches:
            for c in contexts:
                for n in ns:
                    t = tables[spec.name, b, c]
                    if (t.new_tokens == n).any():
                        asked.append((spec.name, b, c, n))
                        out.append(Point(spec.name, runtime.kind, c, n, factor[spec.name] * float(
                            t.time_s[t.new_tokens == n][0]), b))
        return out

    factor = {"tiny-code": 2.0, "tiny-code-draft": 3.0}
    monkeypatch.setattr(drift, "measure_steps", lambda s, r, c, ns, rep: now(s, r, c, [1], ns,
                                                                             factor))
    monkeypatch.setattr(drift, "measure_batched", lambda s, r, c, b, ns, rep: now(s, r, c, b, ns,
                                                                                  factor))
    runtime = Runtime.cpu()
    assert drift.machine_drift(hw, "tiny-code", runtime) == pytest.approx(2.0)
    assert {b for _, b, _, _ in asked} == {1} and max(n for *_, n in asked) <= drift.DRIFT_MAX_N
    asked.clear()
    # a load run's probe: every batch it serves, of the target and its draft model, pooled
    # (as many points of each: the median falls between them)
    assert drift.machine_drift(hw, ["tiny-code", "tiny-code-draft"], runtime, 4) == (
        pytest.approx(2.5))
    assert {b for _, b, _, _ in asked} == {1, 2, 4}
    assert {m for m, *_ in asked} == {"tiny-code", "tiny-code-draft"}
    assert drift.machine_drift(hw, "no-such-model", runtime) is None


def test_a_server_whose_rows_draft_alone_pays_a_level_host_work_per_row() -> None:
    hw = load_profile("cpu-2core")
    draft = CostModel(hw, get_model("tiny-code-draft"), runtime="eager")
    target = CostModel(hw, get_model("tiny-code"), runtime="eager")
    source = "draft:tiny-code-draft"
    priced = {}
    for per_row in (False, True):
        loop = dataclasses.replace(hw.loop, level_per_row=per_row)
        t = CostModel(dataclasses.replace(hw, loop=loop), get_model("tiny-code"), runtime="eager")
        priced[per_row] = BatchPricer(t, draft, source)
    assert target.hw.loop.level > 0
    specs = [Speculation.of(Tree.chain(3, source))] * 4
    extra = priced[True].draft_s([90] * 4, specs) - priced[False].draft_s([90] * 4, specs)
    level = priced[True]._host.level  # the level's host work, cold term included
    assert extra == pytest.approx(3 * 3 * level, rel=1e-9)  # 3 levels × 3 further rows


def test_rows_sharing_a_batched_draft_pay_their_handover_per_level() -> None:
    hw = load_profile("cpu-2core")
    draft = CostModel(hw, get_model("tiny-code-draft"), runtime="eager")
    source = "draft:tiny-code-draft"
    priced = {}
    for shared in (0.0, 1e-4):
        loop = dataclasses.replace(hw.loop, shared_row=shared)
        t = CostModel(dataclasses.replace(hw, loop=loop), get_model("tiny-code"), runtime="eager")
        priced[shared] = BatchPricer(t, draft, source)
    specs = [Speculation.of(Tree.chain(3, source))] * 4 + [Speculation.of(Tree.root())]
    extra = priced[1e-4].step_s([90] * 5, specs) - priced[0.0].step_s([90] * 5, specs)
    assert extra == pytest.approx(3 * 4 * 1e-4, rel=1e-9)  # 3 levels × 4 drafting rows
    # a lone drafting row drafts in the calling thread: nothing shared
    lone = [Speculation.of(Tree.chain(3, source))] + [Speculation.of(Tree.root())] * 4
    assert priced[1e-4].step_s([90] * 5, lone) == priced[0.0].step_s([90] * 5, lone)
    # a model-free drafter shares no draft forward
    ngram = [Speculation.of(Tree.chain(3, "ngram"))] * 4
    assert priced[1e-4].step_s([90] * 4, ngram) == priced[0.0].step_s([90] * 4, ngram)
