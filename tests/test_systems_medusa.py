"""Medusa: K MLP heads priced inside the target's forward; its published rows reproduce."""

import dataclasses
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.engine import ENGINE_DIR, load_engine
from specscope.systems.case import Case
from specscope.systems.medusa import predict
from specscope.systems.reproduce import reproduce

CASE = Case(name="m", system="medusa", hw="a100", target="vicuna-7b", where="t.toml",
            tree=(10, 28, 23, 2), tau=2.5, engine="research-hf")


def test_more_heads_cost_more_drafting() -> None:
    four = predict(CASE)
    six = predict(dataclasses.replace(CASE, options={"heads": 6}))
    assert six.parts["draft"] > four.parts["draft"]
    assert six.parts["verify"] == four.parts["verify"]


def test_each_head_pays_the_loops_level_of_host_work(tmp_path: Path) -> None:
    """Medusa's loop does a top-k and a candidate gather per head (research_loops.py measures
    it per head): on medusa-hf, two more heads cost two levels of host work more than on the
    same engine with no level term."""
    engine = ENGINE_DIR / "medusa-hf.toml"
    bare = tmp_path / "medusa-bare.toml"
    bare.write_text(engine.read_text().replace("level_us = 52.1", "level_us = 0"))
    load_engine.cache_clear()

    def extra_heads(path: Path) -> float:
        on = dataclasses.replace(CASE, engine=str(path))
        return (predict(dataclasses.replace(on, options={"heads": 6})).parts["draft"]
                - predict(on).parts["draft"])

    level = load_engine(str(engine)).loop_costs(load_profile("a100")).level
    assert level > 0
    assert extra_heads(engine) - extra_heads(bare) == pytest.approx(2 * level, rel=1e-9)


def test_draft_is_one_pass_not_levels() -> None:
    """The heads' cost depends on the heads, not on how the tree is spread over levels."""
    wide = predict(dataclasses.replace(CASE, tree=(60, 1, 1, 1)))
    assert wide.parts["draft"] == pytest.approx(predict(CASE).parts["draft"], rel=0.05)


def test_too_few_heads_names_the_case() -> None:
    with pytest.raises(InputError, match=r"case 'm'.*heads = 2"):
        predict(dataclasses.replace(CASE, options={"heads": 2}))


def test_rows_reproduce() -> None:
    rows = reproduce(Path("examples/papers/medusa.toml"))
    assert len(rows) == 3 and all(r.predicted_speedup > 1 for r in rows)
