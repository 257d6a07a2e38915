"""Acceptance statistics stored with the zoo targets: reproducible, round-tripped, and used."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from specscope.executor.generate import generate
from specscope.executor.zoo_acceptance import (
    measure_acceptance,
    store_acceptance,
    stored_acceptance,
)
from specscope.models.zoo import ZOO_DIR, ZOO_TOML, read_zoo_tables, zoo_report
from specscope.models.zoo.train import render_zoo_toml

SOURCE = "draft:tiny-code-draft"
torch.set_num_threads(1)


@pytest.mark.parametrize("target", ["tiny-code", "tiny-ssm"])
def test_shipped_acceptance_is_what_the_shipped_weights_measure(target):
    recorded = zoo_report(target)["acceptance"][SOURCE]
    measured = measure_acceptance(target)
    assert measured == pytest.approx(recorded, abs=1e-3)
    assert 0 < measured[0] < 1 and sum(measured) <= 1 + 1e-9


def test_store_writes_every_target_and_reads_back(tmp_path):
    for path in ZOO_DIR.iterdir():
        if path.suffix in (".safetensors", ".json", ".toml"):
            shutil.copy(path, tmp_path / path.name)
    tables = read_zoo_tables(tmp_path)
    for table in tables.values():
        table.get("training", {}).pop("acceptance", None)
    (tmp_path / ZOO_TOML).write_text(render_zoo_toml(tables))
    (tmp_path / "tiny-ssm.safetensors").unlink()  # an untrained target is skipped
    stored = store_acceptance(tmp_path)
    assert sorted(stored) == ["tiny-code", "tiny-hybrid"]
    vector = stored_acceptance("tiny-code", SOURCE, tmp_path)
    np.testing.assert_allclose(vector, stored["tiny-code"][SOURCE])
    assert stored_acceptance("tiny-ssm", SOURCE, tmp_path) is None
    assert stored_acceptance("tiny-code", "ngram", tmp_path) is None
    assert stored_acceptance("not-a-zoo-model", SOURCE, tmp_path) is None


def test_generate_shapes_static_trees_from_the_stored_acceptance_at_temperature_zero():
    greedy = generate("tiny-code", "draft", "builtin:stdlib-code", 1, 4, algo="sequoia",
                      budget=8, threads=1)
    assert "acceptance stored with the model" in greedy.tree_origin
    sampled = generate("tiny-code", "draft", "builtin:stdlib-code", 1, 4, algo="sequoia",
                       budget=8, temperature=0.8, threads=1)
    assert "calibration pass" in sampled.tree_origin
