"""`validate --load`: the summaries and ranking checks computed from the cells, the time-dilation
drift correction, the JSON shape of a tiny real run, and bad inputs refused with one line."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.validate.load import (
    LoadRequest,
    LoadSizes,
    dilate,
    half_range,
    mean_run,
    run_load_validate,
)
from specscope.validate.load_report import METRICS, cell, frame, ranking, summary


def metrics(throughput: float, tpot: float, ttft: float = 10.0, latency: float = 1.0
            ) -> dict[str, float]:
    return {"throughput_tok_s": throughput, "mean_tpot_ms": tpot, "p99_ttft_ms": ttft,
            "p99_latency_s": latency}


def hand_cells() -> list[dict]:
    """Two policies × two rates; simulated throughput off by +10%, −20%, +30%, 0%."""
    return [
        cell("none", 1.0, 0.5, 1.0, metrics(110, 5.0), metrics(100, 5.0)),
        cell("static", 1.0, 0.5, 1.0, metrics(80, 3.0), metrics(100, 4.0)),
        cell("none", 4.0, 2.0, 1.1, metrics(130, 6.0), metrics(100, 6.0)),
        cell("static", 4.0, 2.0, 1.1, metrics(200, 4.0), metrics(200, 4.5)),
    ]


def test_summary_statistics_from_cells() -> None:
    cells = hand_cells()
    assert [c["err_throughput"] for c in cells] == pytest.approx([0.1, -0.2, 0.3, 0.0])
    s = summary(cells)
    errors = np.array([0.1, 0.2, 0.3, 0.0])
    assert s["throughput"]["median_rel_err"] == pytest.approx(np.median(errors))
    assert s["throughput"]["p90_rel_err"] == pytest.approx(np.percentile(errors, 90))
    assert s["throughput"]["max_rel_err"] == pytest.approx(0.3)
    assert s["mean_tpot"]["max_rel_err"] == pytest.approx(0.25)
    assert s["p99_ttft"]["median_rel_err"] == 0.0
    assert all(s[name]["count"] == 4 for name in METRICS)


def test_ranking_checks() -> None:
    cells = hand_cells()
    # highest rate, throughput: static first on both sides
    assert ranking(cells, "throughput", "highest", "simulated") == ["static", "none"]
    assert ranking(cells, "throughput", "highest", "measured") == ["static", "none"]
    # lowest rate, TPOT (lower first): static first on both sides
    assert ranking(cells, "mean_tpot", "lowest", "measured") == ["static", "none"]
    s = summary(cells)
    assert s["ranking_agrees"] is True and s["mean_tpot"]["ranking_agrees"] is True
    swapped = [*cells[:3], cell("static", 4.0, 2.0, 1.1, metrics(120, 7.0), metrics(200, 4.5))]
    s = summary(swapped)
    assert s["ranking_agrees"] is False
    assert [r["agrees"] for r in s["rankings"]] == [False, True]
    assert s["throughput"]["ranking_agrees"] is False


def test_pairs_the_real_runs_do_not_separate_may_be_ordered_either_way() -> None:
    """At the highest rate the real runs measure static 200 ± 7.5 and none 190 ± 7.5 tok/s: tied,
    so a simulation ranking none first still agrees; at ± 2 each they are separated and it
    does not."""
    def at_highest(sim_none: float, spread: float) -> list[dict]:
        cells = hand_cells()[:2]
        return [*cells,
                cell("none", 4.0, 2.0, 1.0, metrics(sim_none, 6.0), metrics(190, 6.0),
                     {"throughput_tok_s": spread}),
                cell("static", 4.0, 2.0, 1.0, metrics(200, 4.0), metrics(200, 4.5),
                     {"throughput_tok_s": spread})]

    tied = summary(at_highest(210, 7.5))
    assert tied["rankings"][0]["agrees"] is True
    assert tied["rankings"][0]["measured_ties"] == "static ≈ none"
    apart = summary(at_highest(210, 2.0))
    assert apart["rankings"][0]["agrees"] is False
    assert apart["rankings"][0]["measured_ties"] == "static > none"
    # a simulation that also orders them as measured agrees whatever the spread
    assert summary(at_highest(150, 2.0))["rankings"][0]["agrees"] is True


def test_flat_frame_has_one_row_per_cell() -> None:
    table = frame(hand_cells())
    assert table.height == 4
    assert {"policy", "rate", "sim_throughput_tok_s", "real_mean_tpot_ms",
            "err_p99_latency"} <= set(table.columns)


def test_repeats_are_averaged() -> None:
    runs = [{"throughput_tok_s": 100.0, "mean_tpot_ms": 4.0, "policy": "static", "ok": True},
            {"throughput_tok_s": 120.0, "mean_tpot_ms": 6.0, "policy": "static", "ok": True}]
    assert mean_run(runs) == {"throughput_tok_s": 110.0, "mean_tpot_ms": 5.0,
                              "policy": "static", "ok": True}
    assert half_range(runs) == {"throughput_tok_s": 10.0, "mean_tpot_ms": 1.0}
    assert half_range(runs[:1]) == {"throughput_tok_s": 0.0, "mean_tpot_ms": 0.0}


def test_dilation_scales_durations_and_rates() -> None:
    out = dilate({**metrics(100, 5.0, 20.0, 2.0), "mean_batch": 3.0}, 2.0)
    assert out == {**metrics(50, 10.0, 40.0, 4.0), "mean_batch": 3.0}


@pytest.fixture(scope="module")
def tiny_doc() -> dict:
    req = LoadRequest("cpu-2core", "tiny-code", device="cpu", policies=("none", "static"),
                      sizes=LoadSizes(requests=4, output_len=6, fractions=(), max_batch=2,
                                      repeats=2),
                      rates=(5.0, 50.0), threads=1)
    return run_load_validate(req)


def test_json_shape_of_a_tiny_run(tiny_doc: dict) -> None:
    assert len(tiny_doc["cells"]) == 4
    assert {(c["policy"], c["rate"]) for c in tiny_doc["cells"]} == {
        (p, r) for p in ("none", "static") for r in (5.0, 50.0)}
    for name, (key, _) in METRICS.items():
        assert set(tiny_doc[name]) >= {"median_rel_err", "p90_rel_err", "max_rel_err",
                                       "ranking_agrees"}
        for c in tiny_doc["cells"]:
            assert c["measured"][key] > 0 and c["simulated"][key] > 0
    assert isinstance(tiny_doc["ranking_agrees"], bool)
    assert tiny_doc["repeats"] == 2
    assert len(tiny_doc["machine_drift"]) == 9  # before the first real run and after each
    # the same prompts and trace on both sides: the static chain accepts the same per step
    static = [c for c in tiny_doc["cells"] if c["policy"] == "static"]
    for c in static:
        assert c["simulated"]["mean_accepted"] == pytest.approx(c["measured"]["mean_accepted"])


def test_a_schedule_runs_beside_its_best_constant() -> None:
    req = LoadRequest("cpu-2core", "tiny-code", device="cpu", policies=("static", "schedule"),
                      sizes=LoadSizes(requests=4, output_len=6, fractions=(), max_batch=2,
                                      repeats=1),
                      rates=(5.0, 50.0), threads=1)
    doc = run_load_validate(req)
    assert {(c["policy"], c["rate"]) for c in doc["cells"]} == {
        (p, r) for p in ("static", "schedule") for r in (5.0, 50.0)}
    assert doc["schedule"]["schedule"][0]["batch"][0] == 1
    assert doc["schedule"]["schedule"][-1]["batch"][1] == 2
    for c in doc["cells"]:
        assert c["measured"]["throughput_tok_s"] > 0 and c["simulated"]["throughput_tok_s"] > 0


@pytest.mark.parametrize(("change", "words"), [
    ({"model": "nope"}, "--target"),
    ({"policies": ("none", "ets-batch")}, "validate --load"),
    ({"policies": ("none",)}, "validate --load"),
    ({"rates": (1.0, 0.0)}, "rates"),
    ({"hw": "no-such-profile"}, "no-such-profile"),
    ({"repeats": 0}, "--repeats"),
])
def test_bad_requests_are_refused(change: dict, words: str) -> None:
    fields = {"hw": "cpu-2core", "model": "tiny-code", **change}
    with pytest.raises(InputError, match=words):
        run_load_validate(LoadRequest(**fields))


@pytest.mark.parametrize(("args", "words"), [
    (["--target", "nope"], "--target"),
    (["--target", "tiny-code", "--threads", "0"], "--threads"),
])
def test_cli_bad_inputs_exit_2(cli: Callable[..., tuple[int, str, str]], args: list[str],
                               words: str) -> None:
    code, _, err = cli("validate", "--load", "--hw", "cpu-2core", *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err
