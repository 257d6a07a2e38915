"""Impossible or malformed numbers in cases, engine and profile files and deployment options are
refused (issue 40, items 1, 2 and 8): each ends in one `specscope: error:` line and exit status 2,
its input untouched, nothing written; `--json` never holds NaN or Infinity. A fuzz pass mutates a
shipped case and a shipped engine file value by value."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import Cli

from specscope.cli.common import strict_json
from specscope.errors import InputError
from specscope.hw_profiles.engine import ENGINE_DIR, load_engine
from specscope.hw_profiles.profile import DATA_DIR

ROOT = Path(__file__).parent.parent
CASE = ('[[case]]\nname = "x"\nsystem = "head"\nvocab = 32000\nhw = "h100"\nengine = "sglang"\n'
        'target = "qwen3-8b"\nbatch = 16\ncontext = 150\nnew_tokens = 256\ntree = "1,1"\n'
        'published_speedup = 1.58\ntimed_prefill = true\n')
"""The issue's case: a chain of two drafted levels, at most 3 tokens a step."""
OPTIMIZE = ("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
            "llama-3.2-1b", "--acceptance", "0.7,0.15,0.05", "--budget", "8")


def _strict(text: str) -> object:
    """`text` parsed as strict JSON: NaN or Infinity fail the test."""
    def refuse(word: str) -> None:
        raise AssertionError(f"non-JSON constant {word} in the output")
    return json.loads(text, parse_constant=refuse)


def _refused(cli: Cli, folder: Path, *args: object, match: str) -> str:
    """Run a command that must be refused: exit 2, one error line matching `match`, nothing
    written to `folder`, and the line returned."""
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    code, out, err = cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specscope: error:"), err
    assert re.search(match, lines[0]), lines[0]
    assert out == ""
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    return lines[0]


def _case(tmp_path: Path, extra: str, base: str = CASE) -> Path:
    """`base` with the keys of `extra` in place of its own, as case.toml in `tmp_path`."""
    keys = {line.split(" = ")[0] for line in extra.splitlines()}
    kept = [line for line in base.splitlines() if line.split(" = ")[0] not in keys]
    path = tmp_path / "case.toml"
    path.write_text("\n".join(kept) + "\n" + extra)
    return path


# ---- impossible cases --------------------------------------------------------------------------

@pytest.mark.parametrize("extra, match", [
    ("anchor_speedup = 50\n", r"the anchor speedup 50 needs τ = [\d.]+, more than the tree's 3 "
                              r"tokens a step can give \(tree 1,1: 2 drafted levels"),
    ("tau = 5.0\n", r"τ = 5 \(the bonus counted\) is more than the 3 tokens a step can yield"),
    ("tau = 2.5\ntau_includes_bonus = false\n", r"τ = 2.5 \(\+ the bonus = 3.5\) is more than "
                                                "the 3 tokens"),
    ("tau = nan\n", "tau = nan is not a finite number"),
    ("tau = 2.0\npublished_speedup = nan\n", "published_speedup = nan is not a finite number"),
    ("anchor_speedup = inf\n", "anchor_speedup = inf is not a finite number"),
    ("anchor_speedup = 0.1\n", r"the anchor speedup 0.1 needs τ = 0\.\d+, less than the 1 "
                               r"token every step yields \(at τ = 1 this setup already predicts"),
    ("tau = 2.0\nbaseline = \"head\"\nbaseline_tau = 4.0\n", "baseline_tau = 4 is more than "
                                                            "the 3 tokens"),
    ("tau = 2.0\nvocab = 1\n", r"vocab = 1 must lie in 1024\.\.151936"),
    ("tau = 2.0\nengine = \"\"\n", 'engine = "" names nothing'),
    ("tau = 2.0\nengine = \"missing.toml\"\n", "engine = 'missing.toml': no engine file .*"
                                              "read from the case file's folder"),
])
def test_an_impossible_case_is_refused(cli: Cli, tmp_path: Path, extra: str, match: str) -> None:
    path = _case(tmp_path, extra)
    _refused(cli, tmp_path, "reproduce", path, "--json", match=match)


def test_the_trees_bound_itself_is_accepted(cli: Cli, tmp_path: Path) -> None:
    for extra in ("tau = 3.0\n", "tau = 2.0\ntau_includes_bonus = false\n"):
        code, out, err = cli("reproduce", _case(tmp_path, extra), "--json")
        assert code == 0, err
        assert _strict(out)[0]["tokens_per_step"] == 3.0


@pytest.mark.parametrize("system, options, match", [
    ("prompt-lookup", "num_tokens = 3\ntau = 5.0\n", r"more than the 4 tokens a step can yield "
                                                     r"\(a chain of num_tokens = 3"),
    ("lookahead", "ngram = 3\ntau = 3.5\n", r"more than the 3 tokens .*ngram = 3"),
    ("rest", "num_draft = 2\ntau = 3.5\n", r"more than the 3 tokens .*num_draft = 2"),
    ("token-recycling", "tau = 8.0\n", r"more than the 7 tokens .*template 8,21,25,15,8,3"),
])
def test_a_model_free_case_is_held_to_its_own_step(cli: Cli, tmp_path: Path, system: str,
                                                   options: str, match: str) -> None:
    case = (f'[[case]]\nname = "m"\nsystem = "{system}"\nhw = "a100"\ntarget = "llama-2-7b"\n'
            f'published_speedup = 2.0\n{options}')
    _refused(cli, tmp_path, "reproduce", _case(tmp_path, "", case), match=match)


HIERSPEC = ('[[case]]\nname = "h"\nsystem = "hierspec"\nhw = "a100"\ntarget = "llama-3-70b"\n'
            'weight_bits = 4\nruntime = "compile"\ncontext = 128\nnew_tokens = 256\n'
            'tree = "10,10,10"\ndraft = "llama-3-8b"\npublished_speedup = 2.78\n')
"""examples/papers/specmquant.toml's HierSpec case: its τ (4.3) is the target's over the chain the
intermediate hands it, above its head's tree (3 levels), which bounds the inner τ instead."""


@pytest.mark.parametrize("extra, match", [
    ("tau = 4.3\ninner_tau = 4.5\n", r"the inner τ = 4.5 \(head \+ intermediate\) is more than "
                                      r"the 4 tokens .*tree 10,10,10"),
    ("tau = 7.5\ninner_tau = 3.2\n", r"τ = 7.5 \(the bonus counted\) is more than the 7 tokens "
                                      "a step can yield .*the chain of 6.4 tokens"),
])
def test_hierspec_holds_each_tau_to_its_own_step(cli: Cli, tmp_path: Path, extra: str,
                                                 match: str) -> None:
    code, _, err = cli("reproduce", _case(tmp_path, "tau = 4.3\ninner_tau = 3.2\n", HIERSPEC))
    assert code == 0, err  # τ 4.3 over a 3-level tree: the chain, not the tree, bounds it
    _refused(cli, tmp_path, "reproduce", _case(tmp_path, extra, HIERSPEC), match=match)


S2D = ('[[case]]\nname = "s"\nsystem = "s2d"\nhw = "a100"\nengine = "hf-eager"\n'
       'target = "vicuna-7b"\ndraft = "vicuna-7b"\nruntime = "eager"\ntree = "1,1"\n'
       'sub_layers = "6,9"\npublished_speedup = 1.2\n')


@pytest.mark.parametrize("taus, match", [
    ("1.9,nan", "sub_tau nan is not a finite number"),
    ("1.9,3.5", r"sub_tau 3.5 is more than the 3 tokens a step can yield \(tree 1,1"),
])
def test_s2d_sub_drafts_are_held_to_the_tree(cli: Cli, tmp_path: Path, taus: str,
                                             match: str) -> None:
    path = _case(tmp_path, f'sub_tau = "{taus}"\n', S2D)
    _refused(cli, tmp_path, "reproduce", path, match=match)


def test_a_relative_engine_path_is_read_from_the_case_files_folder(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    shutil.copy(ENGINE_DIR / "sglang.toml", folder / "my.toml")
    path = _case(folder, "tau = 2.0\n", CASE.replace('"sglang"', '"my.toml"'))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("reproduce", path, "--json")
    assert code == 0, err
    mine = _strict(out)[0]
    code, out, _ = cli("reproduce", _case(tmp_path, "tau = 2.0\n"), "--json")
    assert mine["predicted_speedup"] == _strict(out)[0]["predicted_speedup"]
    assert mine["engine"] == str(folder / "my.toml")


# ---- engine and profile files ------------------------------------------------------------------

def _engine(tmp_path: Path, old: str, new: str, name: str = "e.toml") -> Path:
    text = (ENGINE_DIR / "vllm.toml").read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    load_engine.cache_clear()
    return path


@pytest.mark.parametrize("old, new, match", [
    ("step_us = 457", "step_us = nan", r"\[loop\] step_us must be a number in \[0, 1e\+06\] µs, "
                                       "got nan"),
    ("device_layer_ratio = 0.523", "device_layer_ratio = nan",
     r"device_layer_ratio must be a number in \(0, 100\], got nan"),
    ("step_us = 457", "step_us = inf", "step_us must be a number .*got inf"),
    ("step_us = 457", "step_us = 1e300", "step_us must be a number .*got 1e\\+300"),
    ("device_layer_ratio = 0.523", "device_layer_ratio = 1e300", "device_layer_ratio must be"),
    ("reference_layer_us = 875.309", "reference_layer_us = -1", "reference_layer_us must be"),
    ("device_layer_ratio = 0.523", "device_layer_ration = 0.523",
     "unknown key 'device_layer_ration'; known: name, description, .*scheduler, sources"),
    ("[scheduler]", "[schedulr]", "unknown table 'schedulr'; known: .*scheduler"),
    ('verify_us = "0: inside step_us (the fit cannot separate them)"', 'verify_us = ""',
     r"\[sources\] verify_us is empty"),
    ('verify_us = "0: inside', 'verfy_us = "0: inside', r"\[sources\] 'verfy_us' names no key"),
    ("max_batch = 256", "max_batch = 100000000000", "max_batch must be a whole number in"),
    ('measured_on = "cpu-2core"', "measured_on = 3", "measured_on must be a profile's name"),
    ('name = "vllm"', 'name = ""', "name must not be empty"),
])
@pytest.mark.parametrize("command", ["cost", "optimize-tree"])
def test_a_bad_engine_file_is_one_line(cli: Cli, tmp_path: Path, old: str, new: str,
                                       match: str, command: str) -> None:
    path = _engine(tmp_path, old, new)
    args = (("cost", "--hw", "h100", "--target", "llama-3.1-8b") if command == "cost"
            else OPTIMIZE)
    _refused(cli, tmp_path, *args, "--engine", path, "--json", match=match)


def test_the_shipped_engine_as_a_file_still_prices(cli: Cli, tmp_path: Path) -> None:
    path = _engine(tmp_path, "", "")
    code, out, err = cli(*OPTIMIZE, "--engine", path, "--json")
    assert code == 0, err
    assert _strict(out)


@pytest.mark.parametrize("old, new, match", [
    ("bf16_tflops = ", "bf16_tflops = nan #", r"\[compute\] bf16_tflops must be a finite"),
    ("bandwidth_gbs = ", "bandwidth_gbs = inf #", r"\[memory\] bandwidth_gbs must be a finite"),
    ("[memory]", "[memory]\ncapacity = 80", r"\[memory\] unknown key 'capacity'; known: "
                                             "capacity_gb, bandwidth_gbs"),
    ("[compute]", "[compte]\nx = 1\n[compute]", "unknown key or table 'compte'"),
    ("[runtime.eager]", "[runtime.eager]\nblendd = 1", r"\[runtime.eager\]: unknown key 'blendd'"),
    ("[host]", "[speculation]\nstep_uss = 3\n[host]", r"\[speculation\] unknown key 'step_uss'"),
])
def test_a_bad_profile_file_is_one_line(cli: Cli, tmp_path: Path, old: str, new: str,
                                        match: str) -> None:
    text = (DATA_DIR / "h100.toml").read_text()
    assert old in text
    path = tmp_path / "box.toml"
    path.write_text(text.replace(old, new, 1))
    _refused(cli, tmp_path, "cost", "--hw", path, "--target", "llama-3.1-8b", "--json",
             match=match)


def test_json_output_is_strict() -> None:
    assert strict_json({"a": [1.0, 2]}, None) == '{"a": [1.0, 2]}'
    with pytest.raises(InputError, match=r"the output's rows\[1\].speedup is not a finite"):
        strict_json({"rows": [{"speedup": 1.0}, {"speedup": float("nan")}]})
    with pytest.raises(InputError, match=r"the output's \[0\] is not a finite"):
        strict_json([float("-inf")])


# ---- deployment options ------------------------------------------------------------------------

@pytest.mark.parametrize("extra, match", [
    (("--draft-tp", "2"), r"--draft-tp 2: the deployment has 1 device \(--tp 1 × --stages 1\)"),
    (("--tp", "2", "--draft-tp", "4"), "--draft-tp 4: the deployment has 2 devices"),
    (("--draft-vocab", "1"), r"--draft-vocab 1: a reduced draft vocabulary lies in "
                             r"1,024\.\.128,256"),
    (("--draft-vocab", "200000"), "--draft-vocab 200000: a reduced draft vocabulary lies in"),
])
def test_an_impossible_deployment_is_refused(cli: Cli, tmp_path: Path, extra: tuple[str, ...],
                                             match: str) -> None:
    _refused(cli, tmp_path, *OPTIMIZE, *extra, "--json", match=match)


@pytest.mark.parametrize("extra", [("--tp", "2", "--draft-tp", "2"),
                                   ("--stages", "2", "--draft-tp", "2"),
                                   ("--draft-vocab", "32000")])
def test_a_possible_deployment_prices(cli: Cli, extra: tuple[str, ...]) -> None:
    code, out, err = cli(*OPTIMIZE, *extra, "--json")
    assert code == 0, err
    assert _strict(out)


def test_a_judge_draft_beyond_the_cases_devices_is_refused(cli: Cli, tmp_path: Path) -> None:
    case = ('[[case]]\nname = "j"\nsystem = "judge"\nhw = "h100"\ntarget = "llama-3.1-8b"\n'
            'draft = "llama-3.2-1b"\ntree = "1,1,1"\nalpha = 0.6\npublished_speedup = 2.0\n'
            'draft_tp = 2\n')
    _refused(cli, tmp_path, "reproduce", _case(tmp_path, "", case),
             match=r"draft_tp = 2: the case has 1 device\(s\)")


# ---- fuzz --------------------------------------------------------------------------------------

MUTATIONS = ("nan", "inf", "-1", "1e300", '""', "[1]")
"""Values no number, string or boolean of these files takes unchecked: each is refused or (where
the key takes it) priced, never a traceback or NaN."""
KEY = re.compile(r"^(\w+) = (.+)$")


def _mutants(text: str, per_key: int) -> list[tuple[str, str]]:
    """(label, text) for `per_key` of `MUTATIONS` at each `key = value` line (rotating, so every
    mutation meets many keys), and one unknown key."""
    lines = text.splitlines()
    out = [("unknown key", text.replace("\n", "\nzz_unknown = 1\n", 1))]
    keyed = [i for i, line in enumerate(lines) if KEY.match(line)]
    for n, i in enumerate(keyed):
        key = KEY.match(lines[i]).group(1)
        for k in range(per_key):
            value = MUTATIONS[(n + k) % len(MUTATIONS)]
            out.append((f"{key} = {value}",
                        "\n".join([*lines[:i], f"{key} = {value}", *lines[i + 1:]]) + "\n"))
    return out


def _fuzzed(cli: Cli, label: str, args: tuple[object, ...]) -> None:
    code, out, err = cli(*args)
    assert "Traceback" not in err and "internal error" not in err, (label, err)
    assert code in (0, 2), (label, code, err)
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("specscope: error:"), (label, err)
    else:
        _strict(out)


def test_fuzzed_cases_are_refused_or_priced(cli: Cli, tmp_path: Path) -> None:
    text = (ROOT / "examples" / "papers" / "medusa.toml").read_text()
    case = "[[case]]" + text.split("[[case]]")[1]
    for n, (label, mutant) in enumerate(_mutants(case, 3)):
        path = tmp_path / f"case-{n}.toml"
        path.write_text(mutant)
        _fuzzed(cli, label, ("reproduce", path, "--json"))
        assert path.read_text() == mutant


def test_fuzzed_engine_files_are_refused_or_priced(cli: Cli, tmp_path: Path) -> None:
    text = (ENGINE_DIR / "sglang.toml").read_text()
    for n, (label, mutant) in enumerate(_mutants(text, 1)):
        path = tmp_path / f"engine-{n}.toml"
        path.write_text(mutant)
        _fuzzed(cli, label, ("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--engine",
                             path, "--json"))
