"""The workload: arrival processes with the rate and burstiness asked for, length
distributions, forking structure, arrival files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.simulator.workload import LengthDist, WorkloadSpec, arrival_times, build_groups


def _spec(**changes: object) -> WorkloadSpec:
    fields = dict(requests=20000, rate=4.0, prompt=LengthDist("fixed", 100),
                  output=LengthDist("fixed", 50)) | changes
    return WorkloadSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("arrivals", "cv"), [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_arrival_gaps_have_the_rate_and_the_coefficient_of_variation(arrivals: str,
                                                                     cv: float) -> None:
    times = arrival_times(_spec(arrivals=arrivals, cv=cv), np.random.default_rng(0))
    gaps = np.diff(np.r_[0.0, times])
    assert gaps.mean() == pytest.approx(1 / 4.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_arrival_files_are_read_and_bad_lines_named(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("0\n0.25\n\n1.5\n2\n")
    assert arrival_times(_spec(requests=3, arrival_file=good), np.random.default_rng(0)
                         ).tolist() == [0, 0.25, 1.5]
    for text, needle in (("0\n2\n1\n", "line 3"), ("0\nx\n", "line 2"), ("0\n", "--requests")):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(InputError, match=needle):
            arrival_times(_spec(requests=3, arrival_file=bad), np.random.default_rng(0))


def test_length_distributions_parse_and_draw() -> None:
    rng = np.random.default_rng(1)
    assert LengthDist.parse("64", "--x").draw(rng, 3).tolist() == [64] * 3
    uniform = LengthDist.parse("uniform:10:20", "--x").draw(rng, 5000)
    assert uniform.min() == 10 and uniform.max() == 20
    lognormal = LengthDist.parse("lognormal:200:0.5", "--x").draw(rng, 20000)
    assert np.median(lognormal) == pytest.approx(200, rel=0.03) and lognormal.min() >= 1
    for bad in ("0", "uniform:5:2", "lognormal:100", "normal:1:2", "x"):
        with pytest.raises(InputError, match="--x"):
            LengthDist.parse(bad, "--x")


def test_forking_requests_hold_b_plus_b_squared_sequences_sharing_prefixes() -> None:
    spec = _spec(requests=5, kind="forking", branches=3, levels=2,
                 output=LengthDist("uniform", 10, 40))
    groups = build_groups(spec, 0, lambda i: None, lambda row: (0, 0), lambda g: 1.0)
    assert spec.sequences_per_request == 3 + 9
    for group in groups:
        assert len(group.first) == 3 and group.sequences == 12
        for parent in group.first:
            assert parent.prompt_len == group.prompt_len and len(parent.children) == 3
            for child in parent.children:
                assert child.prompt_len == parent.prompt_len + parent.output_len
                assert child.level == 2 and child.parent is parent
        outputs = [r.output_len for p in group.first for r in (p, *p.children)]
        assert group.output_tokens == sum(outputs)
