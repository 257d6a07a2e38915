"""The red team of issue 40: every input a new user or an attacker tried that exited 0 with a
wrong or impossible result, hung, blew memory or printed something dangerous. Each case ends in
one `specscope: error:` line and exit status 2 (or, where stated, one warning line and a correct
result), its input untouched, nothing written, within its time limit.

- Items 1, 2, 8: impossible cases, engine and profile files, deployments; strict JSON out; a
  fuzz pass over case, engine and tree files, value by value.
- Items 3, 5: every name that reaches a printed engine command, from an option, a tree file,
  optimize-tree's output, an engine configuration or a trace, is refused unless it is a model
  name, and every printed command parses to exactly the intended words; exports the engines
  could not serve are refused.
- Items 6, 7: imports and serving runs that summed silently, crashed, blew memory or waited.
- Item 8 and the held-out kinds: nothing is priced as a model it was not named, and a file
  missing what says what it is is refused or read with one warning saying what was assumed.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pyarrow.parquet as pq
import pytest
from conftest import Cli
from test_guards import refused

from specscope.errors import InputError
from specscope.hw_profiles.engine import ENGINE_DIR, load_engine
from specscope.hw_profiles.profile import DATA_DIR
from specscope.interop.engine import model_id
from specscope.json_out import strict_json, write_json
from specscope.trace import synth_trace, write_trace
from specscope.tree import Tree

# ==== items 1, 2 and 8: cases, engine and profile files, deployments =========================

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


def _fuzzed(cli: Cli, label: str, args: tuple[object, ...]) -> tuple[int, str]:
    """Run `args`: refused in one line or run with strict JSON out, never a traceback; the
    exit status and stdout."""
    code, out, err = cli(*args)
    assert "Traceback" not in err and "internal error" not in err, (label, err)
    assert code in (0, 2), (label, code, err)
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("specscope: error:"), (label, err)
    else:
        _strict(out)
    return code, out


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



JSON_MUTATIONS = (float("nan"), float("inf"), -1, 1e300, "", [1], None, True, 2**70, "x'; id")
"""Values a tree or optimize-tree file's fields take unchecked nowhere."""


def _json_mutants(doc: object, where: str = "") -> list[tuple[str, object]]:
    """(label, document) with one value of `doc` replaced by one of `JSON_MUTATIONS`, for every
    value in it (rotating the mutations), and with each key of an object removed."""
    out: list[tuple[str, object]] = []
    items = (list(doc.items()) if isinstance(doc, dict)
             else list(enumerate(doc)) if isinstance(doc, list) else [])
    for n, (key, value) in enumerate(items):
        at = f"{where}.{key}" if isinstance(doc, dict) else f"{where}[{key}]"

        def put(new: object, key: object = key) -> object:
            copy = json.loads(json.dumps(doc))
            copy[key] = new
            return copy

        for k in range(2):
            mutation = JSON_MUTATIONS[(len(at) + n + k) % len(JSON_MUTATIONS)]
            out.append((f"{at} = {mutation!r}", put(mutation)))
        if isinstance(doc, dict):
            out.append((f"{at} removed", {k: v for k, v in doc.items() if k != key}))
        out += [(label, put(inner)) for label, inner in _json_mutants(value, at)]
    return out


def test_fuzzed_tree_files_are_refused_or_exported(cli: Cli, tmp_path: Path) -> None:
    """A bare tree and an optimize-tree file, each value mutated in turn (NaN, inf, negative,
    huge, empty, wrong type, a shell payload) or each key removed: `export` and `simulate --tree`
    refuse in one line or run, never a traceback, NaN, or a payload in a printed command."""
    plan = tmp_path / "plan.json"
    assert cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
               "llama-3.2-1b", "--acceptance", "0.7,0.2", "--budget", 4, "--algo",
               "sequoia,chain", "-o", plan)[0] == 0
    plan_doc = json.loads(plan.read_text())
    bare = {"parents": [-1, 0, 0, 1], "ranks": [-1, 0, 1, 0],
            "sources": ["root", "draft:llama-3.2-1b", "draft:llama-3.2-1b", "draft:llama-3.2-1b"]}
    mutants = [(f"tree{label}", doc) for label, doc in _json_mutants(bare)]
    mutants += [(f"plan{label}", doc) for label, doc in _json_mutants(plan_doc)
                if ".results[1]" not in label][::3]  # every third: the plan has many values
    for n, (label, doc) in enumerate(mutants):
        path = tmp_path / f"tree-{n}.json"
        path.write_text(json.dumps(doc))
        text = path.read_text()
        for engine in ("vllm", "sglang"):
            args = ("export", path, "--to", engine, "--target", "llama-3.1-8b", "--drafter",
                    "llama-3.2-1b", "--json")
            code, out = _fuzzed(cli, label, args)
            if code == 0:
                safe(json.loads(out))
        if n % 4 == 0:  # the simulator reads the same files
            _fuzzed(cli, label, ("simulate", "--hw", "h100", "--target", "llama-3.1-8b",
                                 "--drafter", "llama-3.2-1b", "--acceptance", "0.7,0.2",
                                 "--policy", "static", "--tree", path, "--rate", 1,
                                 "--requests", 2, "--seed", 0, "--json"))
        assert path.read_text() == text

# ==== items 3 and 5: printed commands and exports ==============================================

ENGINES = ("vllm", "sglang", "tensorrt-llm", "transformers")
PAYLOADS = {
    "quote": "x'; touch PWNED; echo '",
    "semicolon": "x; touch PWNED",
    "subshell": "$(touch PWNED)",
    "backtick": "`touch PWNED`",
    "newline": "x\ntouch PWNED",
    "double-quote": 'x"; touch PWNED; echo "',
    "option": "--trust-remote-code",
}
PAIR = ("--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b")
"""Llama-3.1-8B drafted by Llama-3.2-1B: one vocabulary, so every engine serves it."""


def command_refused(code: int, out: str, err: str, *words: str) -> None:
    """One line on stderr holding `words`, exit status 2, no traceback, no command printed."""
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "command:" not in out
    assert "PWNED" not in out
    for word in words:
        assert word in err, (word, err)


def intended(doc: dict) -> list[str]:
    """The words `doc`'s command must split into: the engine's program and flags, the served
    target's id, and the configuration as JSON (vLLM, TensorRT-LLM) or as flag values."""
    config, target = doc["config"], model_id(doc["target"])
    compact = (",", ":")
    if doc["engine"] == "vllm":
        tree = ["--attention-backend", "TREE_ATTN"] if "speculative_token_tree" in config else []
        return ["vllm", "serve", target, *tree, "--speculative-config",
                json.dumps(config, separators=compact)]
    if doc["engine"] == "sglang":
        flags = [w for key, value in config.items()
                 for w in (f"--{key.replace('_', '-')}", str(value))]
        return ["python", "-m", "sglang.launch_server", "--model-path", target, *flags]
    options = json.dumps({"speculative_config": config}, separators=compact)
    return ["echo", options, ">", "speculative.yaml", "&&", "trtllm-serve", target,
            "--extra_llm_api_options", "speculative.yaml"]


def safe(doc: dict) -> None:
    """`doc`'s command is exactly the intended one: the shell words (or, for transformers'
    Python lines, the models loaded are the target's and the draft's ids, nothing else runs)."""
    command = doc["command"]
    assert "PWNED" not in command
    if doc["engine"] != "transformers":
        assert shlex.split(command) == intended(doc)
        return
    module = ast.parse(command)
    loaded = [node.args[0].value for node in ast.walk(module) if isinstance(node, ast.Call)
              and getattr(node.func, "attr", "") == "from_pretrained"]
    draft = doc["config"]["generate"].get("assistant_model")
    assert loaded == [model_id(doc["target"])] * 2 + ([draft] if draft else [])
    assert all(isinstance(s, ast.Assign | ast.ImportFrom) for s in module.body)


def printed(out: str) -> dict:
    """The command line printed by `export` or `optimize-tree --to` (no --json)."""
    line = next(x for x in out.splitlines() if x.startswith("command: "))
    return {"command": line.removeprefix("command: ")}


def exported(cli, *args: object) -> list[tuple[int, str, str, dict | None]]:
    """`args` run twice, printed and with --json: each run's (code, out, err, document)."""
    runs = []
    for as_json in (False, True):
        code, out, err = cli(*args, *(("--json",) if as_json else ()))
        doc = json.loads(out) if as_json and code == 0 else None
        runs.append((code, out, err, doc))
    return runs


def check(cli, args: tuple, words: tuple[str, ...] = ()) -> None:
    """`args` refused (with `words`) or exported with safe commands, printed and as JSON."""
    (code, out, err, _), (jcode, jout, jerr, doc) = exported(cli, *args)
    assert code == jcode, (err, jerr)
    if code != 0:
        command_refused(code, out, err, *words)
        command_refused(jcode, jout, jerr, *words)
        return
    assert doc is not None
    safe(doc)
    assert printed(out)["command"] == doc["command"]


def engine_tree(tmp_path: Path, engine: str) -> Path:
    """A tree every `engine` can express (a chain of 2 drafts)."""
    path = tmp_path / f"chain-{engine}.json"
    path.write_text(Tree.chain(2).to_json())
    return path


# ---- item 3: names that reach a printed command ------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_bare_tree_s_source_label_is_refused(cli, tmp_path: Path, engine: str,
                                               payload: str) -> None:
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({"parents": [-1, 0], "ranks": [-1, 0],
                                "sources": ["root", f"draft:{payload}"]}))
    check(cli, ("export", tree, "--to", engine, "--target", "llama-3.1-8b"),
          (f"{tree}: tree sources",))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("option", ["--target", "--drafter"])
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_export_options_are_refused(cli, tmp_path: Path, engine: str, option: str,
                                    payload: str) -> None:
    given = dict(zip(PAIR[::2], PAIR[1::2], strict=True)) | {option: payload}
    args = [w for pair in given.items() for w in pair]
    check(cli, ("export", engine_tree(tmp_path, engine), "--to", engine, *args), (option,))


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict[str, Path]:
    """optimize-tree's -o output and each engine's configuration (optimize-tree --to -o) for
    Llama-3.1-8B drafted by Llama-3.2-1B at n ≤ 2 (one draft: a tree every engine expresses)."""
    from specscope.cli import main

    folder = tmp_path_factory.mktemp("planned")
    out = {"trees": folder / "trees.json"}
    common = ["optimize-tree", "--hw", "h100", *PAIR, "--acceptance", "0.7,0.2", "--budget",
              "2", "--algo", "chain"]
    runs = [[*common, "-o", str(out["trees"])]]
    for engine in ENGINES:
        out[engine] = folder / f"{engine}.json"
        runs.append([*common, "--to", engine, "-o", str(out[engine])])
    for argv in runs:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert not exc.value.code
    return out


def tampered(planned: dict[str, Path], kind: str, field: str, payload: str,
             folder: Path) -> Path:
    """The `kind` file ("trees" or an engine's configuration) with `field` set to `payload`
    (`tree sources`: every drafted node's source `draft:PAYLOAD`)."""
    data = json.loads(planned[kind].read_text())
    if field == "tree sources":
        tree = data["results"][0]["tree"] if kind == "trees" else data["tree"]
        tree = tree.get("tree", tree)
        tree["sources"] = ["root"] + [f"draft:{payload}"] * (len(tree["sources"]) - 1)
    else:
        data[field] = payload
    path = folder / f"{kind}-{field.replace(' ', '-')}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("kind", ["trees", *ENGINES])
@pytest.mark.parametrize("field", ["target", "source", "drafter", "tree sources"])
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_recorded_names_are_refused_or_never_printed(cli, tmp_path: Path, planned: dict,
                                                     kind: str, field: str,
                                                     payload: str) -> None:
    """optimize-tree's -o output and an engine configuration (optimize-tree --to -o), each
    field tampered: the file's name for the target or the draft is refused naming the file and
    the field; the recorded source, which the tree's own sources override, leaves the command
    as intended. Every engine through `tree_export`, one (by turns) through the command line,
    printed and as JSON."""
    from specscope.errors import InputError
    from specscope.interop.document import tree_export

    path = tampered(planned, kind, field, payload, tmp_path)
    for engine in ENGINES:
        if field == "source":  # recorded beside the tree's own sources, which win
            safe(tree_export(path, engine))
            continue
        with pytest.raises(InputError) as exc:
            tree_export(path, engine)
        assert f"{path}: {field}" in str(exc.value) and "\n" not in str(exc.value)
    engine = ENGINES[(list(PAYLOADS.values()).index(payload) + len(field)) % len(ENGINES)]
    check(cli, ("export", path, "--to", engine),
          () if field == "source" else (f"{path}: {field}",))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_optimize_tree_to_refuses_a_source_s_draft(cli, tmp_path: Path, engine: str,
                                                   payload: str) -> None:
    out = tmp_path / "plan.json"
    args = ("optimize-tree", "--hw", "h100", *PAIR, "--acceptance", "0.7,0.2", "--budget", 4,
            "--source", f"draft:{payload}", "--to", engine)
    check(cli, args, ("--source",))
    command_refused(*cli(*args, "-o", out))
    assert not out.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_optimize_tree_to_refuses_a_trace_s_draft(cli, tmp_path: Path, engine: str) -> None:
    trace = tmp_path / "evil.parquet"
    write_trace(synth_trace(requests=2, seed=0, length=32,
                            sources=(f"draft:{PAYLOADS['quote']}",)), trace)
    check(cli, ("optimize-tree", "--hw", "h100", "--trace", trace, *PAIR, "--budget", 4,
                "--to", engine), (f"{trace}: source's draft model",))


@pytest.mark.parametrize("engine", ENGINES)
def test_every_printed_command_is_the_intended_one(cli, tmp_path: Path, engine: str,
                                                   planned: dict) -> None:
    """The clean paths: optimize-tree --to, export of a bare tree, of optimize-tree's output and
    of each engine's configuration, printed and as JSON."""
    check(cli, ("optimize-tree", "--hw", "h100", *PAIR, "--acceptance", "0.7,0.2", "--budget",
                8, "--to", engine))
    check(cli, ("export", engine_tree(tmp_path, engine), "--to", engine, *PAIR))
    for kind in ("trees", *ENGINES):
        check(cli, ("export", planned[kind], "--to", engine))


# ---- item 5: exports a user can run --------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_a_draft_of_another_vocabulary_is_not_exported(cli, tmp_path: Path,
                                                       engine: str) -> None:
    pair = ("--target", "llama-3.1-8b", "--drafter", "llama-68m")
    optimize = ("optimize-tree", "--hw", "h100", *pair, "--acceptance", "0.7,0.2", "--budget", 4)
    assert cli(*optimize)[0] == 0  # pricing the pair is fine
    command_refused(*cli(*optimize, "--to", engine), "32,000", "128,256", "llama-68m")
    command_refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, *pair), "32,000",
                    "128,256")


@pytest.mark.parametrize(("engine", "method", "word"), [
    ("vllm", "eagle3", "EAGLE-3 head"), ("vllm", "eagle", "EAGLE head"),
    ("sglang", "EAGLE3", "EAGLE-3 head"), ("sglang", "EAGLE", "EAGLE head"),
    ("tensorrt-llm", "Eagle3", "EAGLE-3 head"),
    ("vllm", "mtp", "multi-token-prediction"), ("sglang", "NEXTN", "multi-token-prediction"),
])
def test_head_methods_need_a_head(cli, tmp_path: Path, engine: str, method: str,
                                  word: str) -> None:
    optimize = ("optimize-tree", "--hw", "h100", *PAIR, "--acceptance", "0.7,0.2", "--budget", 4,
                "--to", engine, "--export-method", method)
    command_refused(*cli(*optimize), word)
    command_refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, *PAIR,
                         "--export-method", method), word)
    if word.endswith("head"):  # a head named by its Hugging Face id is served
        head = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
        code, out, err = cli("export", engine_tree(tmp_path, engine), "--to", engine,
                             "--target", "llama-3.1-8b", "--drafter", head, "--export-method",
                             method, "--json")
        assert code == 0, err
        assert head in json.loads(out)["command"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("target", "drafter"), [("llama-3.1-8b", "tiny-code-draft"),
                                                 ("tiny-code", "tiny-code-draft")])
def test_a_zoo_model_is_not_exported(cli, tmp_path: Path, engine: str, target: str,
                                     drafter: str) -> None:
    command_refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, "--target",
                         target, "--drafter", drafter), "zoo model")


def test_sglang_refuses_a_tree_its_top_k_never_builds(cli, tmp_path: Path) -> None:
    """Root children of ranks 0 and 5: SGLang keeps a node's top-k children, so it would
    verify ranks 0..5 (top-k 6), never this tree; vLLM and TensorRT-LLM refuse it too."""
    tree = tmp_path / "gap.json"
    tree.write_text(Tree.from_rank_paths([(0,), (5,)]).to_json())
    command_refused(*cli("export", tree, "--to", "sglang", *PAIR), "ranks [0, 5]", "top-k")
    command_refused(*cli("export", tree, "--to", "vllm", *PAIR), "verifies chains only")
    command_refused(*cli("export", tree, "--to", "vllm", *PAIR, "--engine-version", "0.20.2"),
                    "levels do not branch alike")
    command_refused(*cli("export", tree, "--to", "tensorrt-llm", *PAIR, "--export-method", "Eagle3",
                         "--drafter", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"), "ranks [0, 5]")
    fine = tmp_path / "top2.json"
    fine.write_text(Tree.from_rank_paths([(0,), (1,), (0, 0)]).to_json())
    code, out, err = cli("export", fine, "--to", "sglang", *PAIR, "--json")
    assert code == 0, err
    assert json.loads(out)["config"]["speculative_eagle_topk"] == 2


def test_export_reads_the_drafter_optimize_tree_recorded(cli, tmp_path: Path) -> None:
    """The README's quickstart (regression, 4ed05bd): optimize-tree's own -o output exports to
    vLLM with the drafter it priced, Llama-3.2-1B (the target's vocabulary)."""
    trees = tmp_path / "trees.json"
    code, _, err = cli("optimize-tree", "--hw", "h100", *PAIR, "--engine", "vllm",
                       "--acceptance", "0.686", "--budgets", "2,4,8", "--batch", 16,
                       "-o", trees)
    assert code == 0, err
    (code, out, err, _), (_, _, _, doc) = exported(cli, "export", trees, "--to", "vllm")
    assert code == 0, err
    assert doc is not None and doc["config"]["model"] == "meta-llama/Llama-3.2-1B"
    assert doc["drafter"] == "llama-3.2-1b"
    safe(doc)
    assert printed(out)["command"] == doc["command"]


def test_a_systems_stand_in_is_not_exported(cli, tmp_path: Path) -> None:
    """`--system head` prices `llama-3.1-8b/head`, a stand-in no engine can download."""
    out = tmp_path / "plan.json"
    command_refused(*cli("optimize-tree", "--hw", "h100", "--system", "head", "--target",
                         "llama-3.1-8b", "--acceptance", "0.7,0.2", "--budget", 8, "--to", "vllm",
                         "--export-method", "eagle", "-o", out), "llama-3.1-8b/head", "stand-in")
    assert not out.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_refused_export_writes_nothing(cli, tmp_path: Path, engine: str) -> None:
    out = tmp_path / "config.json"
    command_refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, "--target",
                         "llama-3.1-8b", "--drafter", PAYLOADS["quote"], "-o", out), "--drafter")
    assert not out.exists()


# ==== items 6 and 7: imports and serving runs ==================================================

SCRAPE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3000.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1220.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 650.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 380.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 190.0
"""
P0 = 1220 / (1000 + 650 + 380)
DECODE = ("[2026-07-01 12:00:00 TP0] Decode batch, #running-req: {r}, #token: 512, token "
          "usage: 0.01, accept len: {m}, accept rate: 0.40, cuda graph: True, gen throughput "
          "(token/s): 812.40, #queue-req: 0\n")
SGLANG = ("--from", "sglang-log", "--steps", "3", "--topk", "1")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_refused(cli: Cli, tmp_path: Path, content: str | bytes, args: tuple[str, ...],
                   *words: str) -> str:
    """`trace import` of `content` refused in one line naming `words`; input untouched,
    nothing written."""
    path = tmp_path / "input.txt"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    before = digest(path)
    out = tmp_path / "acc.json"
    line = refused(cli("trace", "import", path, *args, "-o", out), str(path), *words)
    assert digest(path) == before and not out.exists()
    return line


# item 7: duplicate series, never summed

@pytest.mark.parametrize(("content", "words"), [
    (SCRAPE + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1700.0\n',
     ('vllm:spec_decode_num_drafts{engine="0",model_name="m"}', "line 9", "line 3",
      "1700 against 1000")),
    (SCRAPE + SCRAPE.replace("} 1000.0", "} 2000.0").replace("} 650.0", "} 1300.0"),
     ("num_drafts", "repeats line 3", "two scrapes")),
    (SCRAPE + SCRAPE.replace("} 190.0", "} 191.0"),
     ('num_accepted_tokens_per_pos{engine="0",model_name="m",position="2"}',)),
], ids=["repeated-num-drafts", "two-scrapes", "one-position-differs"])
def test_conflicting_duplicate_series_are_refused(cli: Cli, tmp_path: Path, content: str,
                                                  words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, content, ("--from", "vllm-metrics"), *words)


def test_a_scrape_pasted_twice_is_counted_once_with_one_warning(cli: Cli,
                                                                tmp_path: Path) -> None:
    once, twice = tmp_path / "once.txt", tmp_path / "twice.txt"
    once.write_text(SCRAPE)
    twice.write_text(SCRAPE + SCRAPE)
    code, out, err = cli("trace", "import", once, "--from", "vllm-metrics")
    assert code == 0 and not err, err
    code, out2, err = cli("trace", "import", twice, "--from", "vllm-metrics")
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "6 series repeated" in lines[0], err
    assert "counted once" in lines[0]
    doc = json.loads(out2)
    assert doc["acceptance"] == [pytest.approx(P0)] == json.loads(out)["acceptance"]
    assert doc["counts"]["drafts"] == 1000


# item 7: counts are whole, finite and bounded

@pytest.mark.parametrize(("old", "new", "words"), [
    ("} 1000.0", "} 300.5", ("num_drafts", "300.5", "whole number")),
    ("} 650.0", "} 1e300", ("position=\"0\"", "whole number")),
    ("} 1000.0", "} +Inf", ("spec_decode_num_drafts is inf",)),
    ("} 1000.0", "} 1.2.3", ("not Prometheus text", "line 3")),
    ('position="2"', 'position="99999999999"', ("position past the 1024",)),
    ('position="2"', 'position="1000"', ("has no position 2",)),
    ("} 1000.0", "} " + "9" * 5000, ("whole number",)),
], ids=["fraction", "1e300", "inf", "1.2.3", "huge-position", "position-gap", "5000-digits"])
def test_bad_vllm_numbers_are_refused(cli: Cli, tmp_path: Path, old: str, new: str,
                                      words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, SCRAPE.replace(old, new, 1), ("--from", "vllm-metrics"),
                   *words)


def test_engines_whose_sum_passes_the_largest_count_are_refused(cli: Cli,
                                                                 tmp_path: Path) -> None:
    big = SCRAPE.replace("} 1000.0", "} 900000000000000.0")
    other = "\n".join(line.replace('engine="0"', 'engine="1"') for line in big.splitlines()
                      if "num_drafts" in line and not line.startswith("#"))
    import_refused(cli, tmp_path, big + other + "\n", ("--from", "vllm-metrics"),
                   "num_drafts is 1800000000000000", "1e+15")


@pytest.mark.parametrize(("content", "words"), [
    ('{"drafts": 1e308, "accepted_per_position": [3]}', ("drafts", "1e+308", "1e+15")),
    ('{"drafts": 300.5, "accepted_per_position": [3]}', ("drafts", "300.5", "whole count")),
    ('{"drafts": 10, "accepted_per_position": [' + "9" * 5000 + "]}", ("not JSON",)),
    ('{"drafts": 10, "accepted_per_position": [' + ", ".join(["1"] * 2000) + "]}",
     ("2000 positions",)),
    ('{"drafts": 10, "accepted_per_position": [3], "pad": "' + "x" * (1 << 20) + '"}',
     ("bytes, over the 1,048,576",)),
], ids=["1e308", "fraction", "5000-digits", "2000-positions", "over-1MiB"])
def test_bad_counts_json_is_refused_without_numpy_warnings(cli: Cli, tmp_path: Path,
                                                           content: str,
                                                           words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, content, ("--from", "json"), *words)


# item 7: SGLang's numbers, named by line

@pytest.mark.parametrize(("running", "mean", "words"), [
    ("3", "2.85.", ("line 3", "accept len '2.85.'", "not a number")),
    ("3", "1.2.3", ("line 3", "'1.2.3'")),
    ("9" * 5000, "2.0", ("line 3", "#running-req", "whole number")),
    ("3", "1" * 5000, ("line 3", "accept len", "not a number")),
    ("-3", "2.0", ("line 3", "#running-req '-3'")),
], ids=["2.85.", "1.2.3", "5000-digit-count", "5000-digit-length", "negative"])
def test_malformed_sglang_numbers_name_their_line(cli: Cli, tmp_path: Path, running: str,
                                                  mean: str, words: tuple[str, ...]) -> None:
    good = DECODE.format(r=3, m="2.1760")
    log = "INFO: started\n" + good + DECODE.format(r=running, m=mean) + good
    import_refused(cli, tmp_path, log, SGLANG, *words)


def test_a_non_utf8_line_is_named(cli: Cli, tmp_path: Path) -> None:
    import_refused(cli, tmp_path, SCRAPE.encode() + b"# \xff\xfe\n",
                   ("--from", "vllm-metrics"), "line 9", "not UTF-8")


# item 6: bounded reads

def test_a_file_too_big_to_read_in_time_is_refused_before_reading(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSCOPE_TIME_LIMIT_MIN", "0.0001")  # 6 ms: 120 kB at 20 MB/s
    content = SCRAPE + "# padding\n" * 50_000
    import_refused(cli, tmp_path, content, ("--from", "vllm-metrics"), "--from vllm-metrics",
                   "SPECSCOPE_TIME_LIMIT_MIN")
    import_refused(cli, tmp_path, DECODE.format(r=3, m="2.0") * 2000, SGLANG,
                   "--from sglang-log")


def test_a_long_line_is_skipped_unread_unless_it_is_a_counter(cli: Cli,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_text("# " + "x" * 300_000 + "\n" + SCRAPE)
    code, out, err = cli("trace", "import", path, "--from", "vllm-metrics")
    assert code == 0 and json.loads(out)["acceptance"] == [pytest.approx(P0)], err
    long_label = 'vllm:spec_decode_num_drafts_total{x="' + "y" * 100_000 + '"} 1.0\n'
    import_refused(cli, tmp_path, SCRAPE + long_label, ("--from", "vllm-metrics"),
                   "line 9", "longer than")


RSS_CHECK = """
import resource, sys
from pathlib import Path
from specscope.interop.trace_import import import_file
from specscope.interop.families import TopK
path, origin = Path(sys.argv[1]), sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
doc = import_file(path, origin, setting=TopK(3, 1, 4))
print(doc["acceptance"][0], (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


@pytest.mark.parametrize("origin", ["vllm-metrics", "sglang-log"])
def test_a_big_file_is_read_in_bounded_memory(tmp_path: Path, origin: str) -> None:
    """A 20 MB file grows the reader by far less than the file (the old whole-text parse grew
    it by over ten times the file)."""
    path = tmp_path / "big.txt"
    with path.open("w") as f:
        if origin == "vllm-metrics":
            f.write(SCRAPE)
            block = "".join(f'vllm:other_seconds_bucket{{le="{i}",model_name="m"}} {i}.0\n'
                            for i in range(1000))
        else:
            block = ("INFO: other line\n" * 3 + DECODE.format(r=3, m="2.1760")) * 200
        while f.tell() < 20e6:
            f.write(block)
    result = subprocess.run([sys.executable, "-c", RSS_CHECK, str(path), origin],
                            capture_output=True, text=True, timeout=120, check=True,
                            env={**os.environ, "SPECSCOPE_TIME_LIMIT_MIN": "60"})
    p0, grown_mb = map(float, result.stdout.split())
    assert p0 == pytest.approx(P0 if origin == "vllm-metrics" else 0.6, abs=1e-3)
    assert grown_mb < 30, f"the reader grew by {grown_mb:.0f} MB on a 20 MB file"


# item 6: bounded waits

class Slow(BaseException):
    """The command ran past the limit a refusal must meet (not an `Exception`: the command
    line's last-resort handler must not catch it)."""


def _alarm(_: int, __: FrameType | None) -> None:
    raise Slow


def serve_bench(cli: Cli, *args: object, limit_s: int = 60) -> tuple[int, str, str]:
    """`specscope serve-bench ARGS`, failed after `limit_s` seconds (a run that waits for its
    arrivals fails the test instead of hanging it)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    try:
        return cli("serve-bench", "--target", "tiny-code", "--device", "cpu", *args)
    except Slow:
        pytest.fail(f"serve-bench {' '.join(map(str, args))}: still running after {limit_s} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_arrivals_past_the_time_limit_are_refused_before_any_model_runs(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECSCOPE_TIME_LIMIT_MIN", raising=False)
    refused(serve_bench(cli, "--rate", "1e-9", "--requests", "3"), "--rate 1e-09 with --requests 3",
            "last arrival", "over the limit of 10 min", "SPECSCOPE_TIME_LIMIT_MIN")
    arrivals = tmp_path / "arrivals.txt"
    arrivals.write_text("0\n1\n100000\n")
    before = digest(arrivals)
    refused(serve_bench(cli, "--rate", "1", "--requests", "3", "--arrival-file", arrivals),
            f"--arrival-file {arrivals}", "100,000 s")
    assert digest(arrivals) == before


def test_serve_bench_warns_of_prompts_past_the_trained_context(cli: Cli,
                                                                tmp_path: Path) -> None:
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"prompt": "def f(x):\n" * 200}) + "\n")
    code, out, err = serve_bench(cli, "--rate", "100", "--requests", "1", "--prompts", prompts,
                                 "--output-len", "2", "--chunked-prefill", "256", "--json")
    assert code == 0, err
    lines = [line for line in err.strip().splitlines() if "warning" in line]
    assert len(lines) == 1 and "512-token trained context" in lines[0], err
    assert f"--prompts {prompts}" in lines[0] and "--output-len 2" in lines[0]
    assert json.loads(out)["arrivals"] == 1


def test_serve_bench_refuses_a_run_longer_than_max_wall(cli: Cli, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's 80,000-token prompt chunked by 256 on tiny-code (512-token trained context):
    its estimated wall time passes --max-wall, so it is refused before any step, after the
    trained-context warning."""
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"prompt": "def f(x): return x + 1 " * 8000}) + "\n")
    code, out, err = serve_bench(cli, "--rate", "1", "--requests", "1", "--prompts", prompts,
                                 "--chunked-prefill", "256", "--max-wall", "60", limit_s=40)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and not out, err
    assert "512-token trained context" in lines[0]
    assert lines[1].startswith("specscope: error: --max-wall 60:") and "prefill" in lines[1]
    monkeypatch.setenv("SPECSCOPE_TIME_LIMIT_MIN", "1")  # without --max-wall: the time limit
    code, out, err = serve_bench(cli, "--rate", "1", "--requests", "1", "--prompts", prompts,
                                 "--chunked-prefill", "256", limit_s=40)
    errors = [line for line in err.splitlines() if "warning" not in line]
    refused((code, out, "\n".join(errors)), "prefill", "SPECSCOPE_TIME_LIMIT_MIN=1")
    code, _, err = serve_bench(cli, "--rate", "50", "--requests", "2", "--prompts",
                               "builtin:sql", "--output-len", "2", "--max-wall", "60")
    assert code == 0, err


# ==== item 8 and the held-out kinds: named models, files that say what they are ================

@pytest.mark.parametrize("args", [
    ("optimize-tree", "--hw", "h100", "--acceptance", "0.6,0.2", "--budget", "8"),
    ("cost", "--hw", "h100"),
])
def test_nothing_is_priced_as_a_model_it_was_not_named(cli: Cli, args: tuple[str, ...]) -> None:
    refused(cli(*args), "--target", "llama-3.1-8b")
    code, _, err = cli(*args, "--target", "llama-3.1-8b")
    assert code == 0, err


@pytest.mark.parametrize("target", ["synthetic", "my-hf-folder", None])
def test_a_trace_of_an_unpriceable_target_needs_target(cli: Cli, tmp_path: Path,
                                                       target: str | None) -> None:
    """A synthetic trace, one collected from a user's own folder, and one whose metadata lost
    its target name no model the catalogue prices: refused without --target, priced with it."""
    trace = synth_trace(4, 0, sources=("draft:llama-68m",), length=16)
    metadata = {k: v for k, v in trace.metadata.items() if k != "target_model"}
    if target is not None:
        metadata["target_model"] = target
    path = write_trace(dataclasses.replace(trace, metadata=metadata), tmp_path / "t.parquet")
    args = ("optimize-tree", "--hw", "h100", "--trace", path, "--budget", "8")
    refused(cli(*args), str(path), "--target")
    assert cli(*args, "--target", "llama-2-7b")[0] == 0


def test_a_trace_without_its_metadata_warns_what_it_assumed(cli: Cli, tmp_path: Path) -> None:
    path = write_trace(synth_trace(4, 0, length=16), tmp_path / "t.parquet")
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(path).replace_schema_metadata({}), bare)
    code, out, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b", "--trace",
                         bare, "--budget", "8", "--json")
    assert code == 0 and json.loads(out)["results"], err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no schema_version or temperature" in lines[0], err
    assert "temperature 0" in lines[0]


@pytest.mark.parametrize("key", ["target", "source"])
def test_an_optimize_tree_file_without_what_it_was_chosen_for_is_refused(
        cli: Cli, tmp_path: Path, key: str) -> None:
    plan = tmp_path / "plan.json"
    assert cli(*OPTIMIZE, "-o", plan)[0] == 0
    doc = json.loads(plan.read_text())
    del doc[key]
    plan.write_text(json.dumps(doc))
    refused(cli("export", plan, "--to", "vllm"), str(plan), f"without its {key}")
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                "llama-3.2-1b", "--acceptance", "0.7", "--policy", "static", "--tree", plan,
                "--rate", 1, "--requests", 2), f"without its {key}")


def test_non_json_writers_are_strict(tmp_path: Path) -> None:
    """The writers outside the commands' --json: trace metadata (an infinite temperature
    passes the schema's check, ≥ 0, and is refused as JSON), a JSON file."""
    trace = synth_trace(2, 0, length=8)
    bad = dataclasses.replace(trace, metadata={**trace.metadata, "temperature": float("inf")})
    with pytest.raises(InputError, match="temperature is not a finite number"):
        write_trace(bad, tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"x\[1\]"):
        write_json(tmp_path / "x.json", {"x": [1.0, float("inf")]})
    assert not list(tmp_path.iterdir())
