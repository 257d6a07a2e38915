"""A model named by its Hugging Face config (issue 41, item 1): `cost`, `optimize-tree`,
`simulate`, a sweep and a `reproduce` case take `--target path/config.json` (or its folder) for
every family the parser reads; a config equal to a catalogue entry prices as that entry does, to
1e-9; a config that cannot be read is one line, exit status 2. And the expert-coverage law as
`cost` shows it: an MoE target's step grows with the tokens it verifies, a dense one's barely."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import Cli
from test_guards import refused

CONFIGS = Path(__file__).parent / "data" / "configs"
FAMILIES = sorted(p.name for p in CONFIGS.iterdir() if (p / "config.json").exists())
TP = {"deepseek-v3": 8, "qwen3-235b-a22b": 8, "gpt-oss-120b": 2, "mixtral-8x7b": 2}
"""Devices each big model is priced on (a tp that divides its heads and widths)."""


def _numbers(doc: object, skip: frozenset[str] = frozenset({"model", "target", "name"})
             ) -> list[float]:
    """Every number in `doc`, in order, skipping the fields that name the model."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() if k not in skip for x in _numbers(v, skip)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v, skip)]
    return [float(doc)] if isinstance(doc, int | float) and not isinstance(doc, bool) else []


def _same(a: object, b: object) -> None:
    x, y = _numbers(a), _numbers(b)
    assert len(x) == len(y) and x, (len(x), len(y))
    assert all(abs(u - v) <= 1e-9 * max(1.0, abs(u)) for u, v in zip(x, y, strict=True))


def _json(cli: Cli, *args: object) -> object:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_prices_from_its_config(cli: Cli, family: str) -> None:
    tp = str(TP.get(family, 1))
    doc = _json(cli, "cost", "--hw", "h200", "--target", CONFIGS / family / "config.json",
                "--tp", tp, "--new-tokens", "4")
    assert doc["step_time_ms"] > 0


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"])
def test_a_config_equal_to_a_catalogue_entry_prices_the_same(cli: Cli, tmp_path: Path,
                                                             name: str) -> None:
    config = CONFIGS / name / "config.json"
    fit = ("--tp", str(TP.get(name, 1)), "--weight-bits", "8" if name == "deepseek-v3" else "16")
    for args in (("cost", "--hw", "h200", *fit, "--new-tokens", "8", "--batch", "4"),
                 ("optimize-tree", "--hw", "h200", *fit, "--drafter", "ngram",
                  "--acceptance", "0.6,0.2", "--budget", "8", "--algo", "sequoia,chain"),
                 ("simulate", "--hw", "h200", *fit, "--drafter", "ngram", "--acceptance",
                  "0.6", "--rate", "2", "--requests", "8", "--seed", "0")):
        by_name = _json(cli, *args, "--target", name)
        _same(by_name, _json(cli, *args, "--target", config))
        _same(by_name, _json(cli, *args, "--target", config.parent))
    if name != "llama-3.1-8b":  # a case prices one device: only the small model fits
        return
    case = ('[[case]]\nname = "x"\nsystem = "draft-model"\nhw = "h200"\ntarget = "{}"\n'
            'draft = "llama-3.2-1b"\ntree = "1,1,1"\ntau = 2.5\npublished_speedup = 1.9\n'
            'source = "a test"\n')
    docs = []
    for n, target in enumerate((name, config)):
        path = tmp_path / f"case-{n}.toml"
        path.write_text(case.format(target))
        docs.append(_json(cli, "reproduce", path))
    _same(*docs)


def test_a_sweep_takes_a_config(cli: Cli, tmp_path: Path) -> None:
    config = CONFIGS / "mixtral-8x7b" / "config.json"
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'seed = 0\n[acceptance]\nngram = [0.45]\n[[grid]]\nname = "g"\n'
                     f'hardware = ["h100"]\ntarget = ["{config}", "mixtral-8x7b"]\n'
                     f'drafter = ["ngram"]\nmethod = ["chain"]\nbudget = [4, 8]\ntp = [2]\n')
    code, _, err = cli("sweep", sweep, "-o", tmp_path / "s.parquet")
    assert code == 0, err
    table = pl.read_parquet(tmp_path / "s.parquet").sort("budget", "target")
    assert table["status"].to_list() == ["ok"] * 4
    speedups = table["speedup"].to_list()
    assert speedups[0] == pytest.approx(speedups[1], rel=1e-9)
    assert speedups[2] == pytest.approx(speedups[3], rel=1e-9)


@pytest.mark.parametrize(("edit", "words"), [
    ({"architectures": ["FalconForCausalLM"]}, ("FalconForCausalLM", "LlamaForCausalLM")),
    ({"hidden_size": None}, ("hidden_size",)),
    ({"num_hidden_layers": "many"}, ("num_hidden_layers",)),
])
def test_a_config_that_cannot_be_read_is_one_line(cli: Cli, tmp_path: Path, edit: dict,
                                                  words: tuple[str, ...]) -> None:
    doc = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text())
    doc.update(edit)
    doc = {k: v for k, v in doc.items() if v is not None}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(doc))
    for args in (("cost", "--hw", "h100"),
                 ("optimize-tree", "--hw", "h100", "--acceptance", "0.6", "--budget", "4"),
                 ("simulate", "--hw", "h100", "--acceptance", "0.6", "--drafter", "ngram",
                  "--rate", "1", "--requests", "2")):
        refused(cli(*args, "--target", config), str(config), *words)
    broken = tmp_path / "broken" / "config.json"
    broken.parent.mkdir()
    broken.write_text('{"architectures": [')
    refused(cli("cost", "--hw", "h100", "--target", broken), str(broken))


def _steps(cli: Cli, target: str, batch: int, tp: int, *extra: str) -> list[float]:
    return [_json(cli, "cost", "--hw", "h200", "--target", target, "--tp", str(tp), "--batch",
                  str(batch), "--new-tokens", str(n), *extra)["step_time_ms"]
            for n in (1, 2, 4, 8, 16)]


def test_cost_shows_the_expert_coverage_growth(cli: Cli) -> None:
    """DeepSeek-V3 on eight H200s: verifying more tokens touches more of its 256 experts, so
    the step grows with n at batch 1 (where a dense model's step is flat) and saturates at
    batch 32 (32 × 16 tokens touch nearly all of them); qwq-32b is a dense model of about its
    active size (32.8B against 37B)."""
    moe1, moe32 = _steps(cli, "deepseek-v3", 1, 8), _steps(cli, "deepseek-v3", 32, 8)
    dense1 = _steps(cli, "qwq-32b", 1, 8)
    assert all(b > a for a, b in itertools.pairwise(moe1))
    assert moe1[-1] / moe1[0] > 1.5 * dense1[-1] / dense1[0]
    assert dense1[-1] / dense1[0] < 1.15
    growth32 = [b / a for a, b in itertools.pairwise(moe32)]
    assert growth32[-1] < (moe1[-1] / moe1[-2])  # coverage saturates at batch 32


def test_expert_parallelism_and_formats_reach_every_pricing_command(cli: Cli) -> None:
    """--ep 1 and bf16 are the defaults exactly; fp8 fits DeepSeek-V3 on eight H200s where bf16
    does not; an FP8 KV cache holds less; a seed system refuses the plain target's formats."""
    base = ("--hw", "h200", "--target", "mixtral-8x7b", "--tp", "2")
    for command in (("cost", *base), ("optimize-tree", *base, "--acceptance", "0.6,0.2",
                                      "--budget", "8", "--algo", "chain"),
                    ("simulate", *base, "--acceptance", "0.6", "--drafter", "ngram", "--rate",
                     "1", "--requests", "4", "--seed", "0")):
        plain = _json(cli, *command)
        _same(plain, _json(cli, *command, "--ep", "1", "--precision", "bf16", "--kv-bits", "16"))
        assert _numbers(plain) != _numbers(_json(cli, *command, "--ep", "2",
                                                 "--precision", "fp8"))
    v3 = ("cost", "--hw", "h200", "--target", "deepseek-v3", "--tp", "8")
    assert not _json(cli, *v3)["fits"] and _json(cli, *v3, "--precision", "fp8")["fits"]
    kv16 = _json(cli, *v3, "--precision", "fp8", "--batch", "64", "--context", "8192")
    kv8 = _json(cli, *v3, "--precision", "fp8", "--batch", "64", "--context", "8192",
                "--kv-bits", "8")
    assert kv8["memory_gb"] < kv16["memory_gb"]
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--system", "head",
                "--acceptance", "0.6", "--budget", "4", "--precision", "fp8"),
            "--precision", "--system head")
    refused(cli(*v3, "--ep", "3"), "--ep")
    refused(cli("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--precision", "nvfp4"),
            "--precision nvfp4", "h100")
