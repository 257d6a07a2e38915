"""Guards before any work: output paths, numbers, files read, names reserved, setups that cannot
fit, mismatched inputs. Each refusal is one stderr line and exit status 2, inputs unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import Cli

from specscope.errors import InputError
from specscope.hw_profiles.profile import DATA_DIR, PROFILE_DIR_ENV
from specscope.models.zoo import ZOO_DIR, load_zoo_model, weights_path

PAPERS = Path(__file__).parent.parent / "examples" / "papers"


def refused(result: tuple[int, str, str], *words: str) -> str:
    """The one stderr line of a refusal, checked to name every one of `words`."""
    code, _, err = result
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specscope: error:"), err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def trace(tmp_path: Path, cli: Cli) -> Path:
    path = tmp_path / "x.parquet"
    assert cli("trace", "synth", "--requests", "2", "--length", "16", "-o", path)[0] == 0
    return path


# outputs

def test_an_existing_output_needs_force_and_is_left_as_it_was(cli: Cli, trace: Path) -> None:
    before = trace.read_bytes()
    refused(cli("trace", "synth", "--requests", "3", "--seed", "1", "-o", trace), "exists",
            "--force")
    assert trace.read_bytes() == before
    assert cli("trace", "synth", "--requests", "3", "--seed", "1", "-o", trace, "--force")[0] == 0
    assert trace.read_bytes() != before


@pytest.mark.parametrize("args", [
    ("trace", "synth", "-o", "{dir}"),
    ("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
     "--acceptance", "0.6,0.2", "--budget", "8", "-o", "{dir}"),
    ("reproduce", str(PAPERS / "hydra.toml"), "-o", "{dir}"),
    ("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "1", "--requests", "2",
     "--seed", "0", "-o", "{dir}"),
    ("profile-hw", "--name", "box", "--quick", "-o", "{dir}"),
    ("dashboard", "{dir}", "-o", "{dir}"),
])
def test_a_folder_where_a_file_is_meant_is_refused_before_any_work(
        cli: Cli, tmp_path: Path, args: tuple[str, ...]) -> None:
    refused(cli(*[a.format(dir=tmp_path) for a in args]), "is a folder")


def test_a_file_where_a_folder_is_meant_is_refused_before_any_work(cli: Cli, trace: Path) -> None:
    refused(cli("validate", "--hw", "cpu-2core", "--target", "tiny-code", "--device", "cpu",
                "--quick", "-o", trace), "is a file")
    refused(cli("demo", "--quick", "-o", trace), "is a file")


def test_validate_refuses_to_replace_its_table_without_force(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "validate.parquet").write_text("kept")
    refused(cli("validate", "--hw", "cpu-2core", "--target", "tiny-code", "--device", "cpu",
                "--quick", "-o", tmp_path), "validate.parquet", "--force")
    assert (tmp_path / "validate.parquet").read_text() == "kept"


def test_an_output_that_is_an_input_is_refused_even_with_force(cli: Cli, trace: Path) -> None:
    before = trace.read_bytes()
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                "--trace", trace, "--budget", "8", "-o", trace,
                "--force"), "input")
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--trace", trace,
                "--rate", "1", "--requests", "2", "--seed", "0", "-o", trace, "--force"), "input")
    assert trace.read_bytes() == before


def test_simulate_checks_the_files_it_writes_beside_its_output(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "m.events.parquet").write_text("kept")
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "1",
                "--requests", "2", "--seed", "0", "-o", tmp_path / "m.parquet"),
            "m.events.parquet", "exists")
    assert not (tmp_path / "m.parquet").exists()


def test_an_unwritable_parent_is_refused(cli: Cli, trace: Path) -> None:
    refused(cli("trace", "synth", "-o", trace / "y.parquet"), "is a file, not a folder")


def test_a_sweep_resumes_its_own_output_but_never_writes_over_its_config(
        cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "s.toml"
    config.write_text('hardware = ["h100"]\n')
    refused(cli("sweep", config, "-o", config), "input")


# numbers

@pytest.mark.parametrize("option, value, words", [
    ("--rate", "nan", ("--rate", "finite")),
    ("--rate", "inf", ("--rate", "finite")),
    ("--rate", "0", ("--rate", "> 0")),
    ("--requests", "0", ("--requests",)),
    ("--cv", "-1", ("--cv", "> 0")),
    ("--link-us", "-1", ("--link-us", ">= 0")),
    ("--offload", "1.5", ("--offload", "[0, 1]")),
    ("--max-batch", "0", ("--max-batch",)),
    ("--seed", "-1", ("--seed",)),
])
def test_numbers_outside_their_range_are_refused(cli: Cli, option: str, value: str,
                                                 words: tuple[str, ...]) -> None:
    args = {"--rate": "1", "--requests": "2", "--seed": "0", option: value}
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--acceptance", "0.5",
                *[x for kv in args.items() for x in kv]), *words)


def test_a_non_finite_acceptance_is_refused(cli: Cli) -> None:
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                "--acceptance", "0.5,nan", "--budget", "8"),
            "--acceptance")


# files read

def test_a_profile_with_a_non_finite_value_is_refused(cli: Cli, tmp_path: Path) -> None:
    text = (DATA_DIR / "h100.toml").read_text()
    bad = tmp_path / "nan-box.toml"
    bad.write_text("\n".join("bandwidth_gbs = nan" if line.startswith("bandwidth_gbs") else line
                             for line in text.splitlines()))
    refused(cli("cost", "--hw", bad, "--target", "llama-3.1-8b"), "bandwidth_gbs", "finite")


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe", ("not UTF-8",)),
    (b"{bad", ("not JSON",)),
    (b"[1, 2]", ("expected an object",)),
    (b'{"parents": [-1, 0], "ranks": [0, "a"], "sources": ["root", "x"]}', ("integers",)),
    (b'{"parents": [-1, 0]}', ("missing field ranks, sources",)),
])
def test_a_malformed_tree_file_is_one_line(cli: Cli, tmp_path: Path, content: bytes,
                                           words: tuple[str, ...]) -> None:
    tree = tmp_path / "t.json"
    tree.write_bytes(content)
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter", "ngram",
                "--acceptance", "0.5", "--policy", "static", "--tree", tree, "--rate", "1",
                "--requests", "2", "--seed", "0"), "t.json", *words)


@pytest.mark.parametrize("content", [b"\xff", b"x = [", b"[[case]]\nname = 1\n"])
def test_a_malformed_scenario_or_sweep_file_is_one_line(cli: Cli, tmp_path: Path,
                                                       content: bytes) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(content)
    refused(cli("reproduce", path), "s.toml")
    refused(cli("sweep", path, "-o", tmp_path / "out.parquet"), "s.toml")


GENERATE = ("generate", "--drafter", "ngram", "--algo", "chain", "--budget", "4", "--prompts",
            "builtin:sql", "--n", "1", "--output-len", "4", "--device", "cpu")


def test_a_missing_model_folder_is_not_called_an_unknown_zoo_model(cli: Cli) -> None:
    line = refused(cli(*GENERATE, "--target", "./missing/model"), "./missing/model",
                   "no such folder")
    assert "unknown zoo model" not in line


def test_corrupt_weights_are_one_line(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "zoo"
    shutil.copytree(ZOO_DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    weights = weights_path("tiny-code", folder)
    weights.write_bytes(weights.read_bytes()[:1000])
    config = tmp_path / "hf"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    refused(cli(*GENERATE, "--target", config), "config.json")
    (config / "config.json").write_text("[]")
    refused(cli(*GENERATE, "--target", config), "not a JSON object")
    with pytest.raises(InputError, match="not readable as safetensors"):
        load_zoo_model("tiny-code", directory=folder)


# names reserved

def test_a_shipped_profile_name_is_reserved(cli: Cli, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    refused(cli("profile-hw", "--name", "h100", "--quick"), "--name h100", "shipped", "--force")
    assert not list(tmp_path.iterdir())


def test_a_user_profile_shadowing_a_shipped_one_is_named_when_used(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    shutil.copy(DATA_DIR / "cpu-2core.toml", tmp_path / "h100.toml")
    code, out, err = cli("cost", "--hw", "h100", "--target", "llama-3.1-8b")
    assert code == 0 and out
    assert f"specscope: warning: --hw h100: read {tmp_path / 'h100.toml'}" in err


def test_an_existing_user_profile_needs_force(cli: Cli, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    (tmp_path / "mybox.toml").write_text("kept")
    refused(cli("profile-hw", "--name", "mybox", "--quick"), "mybox.toml", "--force")
    assert (tmp_path / "mybox.toml").read_text() == "kept"


# setups that cannot fit

def test_optimize_tree_refuses_a_kv_cache_beyond_the_device(cli: Cli) -> None:
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                "--acceptance", "0.6,0.2", "--budget", "8",
                "--context", "10000000"), "--hw h100", "KV cache", "GB")
    refused(cli("optimize-tree", "--hw", "h100", "--acceptance", "0.6,0.2", "--budget", "8",
                "--target", "llama-3.1-405b"), "do not fit")


def test_a_scenario_that_cannot_fit_its_devices_is_refused(cli: Cli, tmp_path: Path) -> None:
    case = ('[[case]]\nname = "big"\nsystem = "draft-model"\nhw = "a100"\n'
            'target = "llama-2-70b"\ndraft = "llama-2-7b"\ntree = "1,1"\ntau = 2.0\n'
            'published_speedup = 1.5\n')
    path = tmp_path / "c.toml"
    path.write_text(case)
    refused(cli("reproduce", path), "'big'", "does not fit", "1 device(s)")
    path.write_text(case + "gpus = 2\n")
    assert cli("reproduce", path)[0] == 0
    path.write_text(case + "tp = 2\ngpus = 1\n")
    refused(cli("reproduce", path), "gpus = 1", "tp = 2")


# mismatches

def test_a_tree_optimised_for_another_drafter_is_refused(cli: Cli, tmp_path: Path) -> None:
    trees = tmp_path / "trees.json"
    trees.write_text(json.dumps({"results": [{"algo": "chain", "tree": {
        "parents": [-1, 0], "ranks": [0, 0], "sources": ["root", "ngram"]}}],
        "source": "ngram", "target": "tiny-code", "hardware": "cpu-2core"}))
    args = ("generate", "--target", "tiny-code", "--tree", trees, "--prompts", "builtin:sql",
            "--n", "1", "--output-len", "4", "--device", "cpu")
    refused(cli(*args, "--drafter", "draft"), "ngram", "--drafter draft")
    assert cli(*args, "--drafter", "ngram")[0] == 0


def test_prompts_past_the_trained_context_are_named(cli: Cli, tmp_path: Path) -> None:
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"prompt": "def f(x):\n" * 200}) + "\n")
    code, _, err = cli("generate", "--target", "tiny-code", "--drafter", "ngram", "--algo",
                       "chain", "--budget", "4", "--prompts", prompts, "--n", "1",
                       "--output-len", "4", "--device", "cpu")
    assert code == 0
    assert "warning: " in err and "512-token trained context" in err


# no traceback

def test_an_internal_error_is_one_line_unless_debugging(cli: Cli,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import specscope.hw_profiles

    def broken(*_: object) -> None:
        raise RuntimeError("deliberately broken\nsecond line")

    monkeypatch.setattr(specscope.hw_profiles, "load_profile", broken)
    code, _, err = cli("cost", "--hw", "h100", "--target", "llama-3.1-8b")
    assert code == 1
    assert err.strip() == ("specscope: internal error: RuntimeError: deliberately broken "
                           "(please report it with the command; SPECSCOPE_DEBUG=1 shows the "
                           "traceback)")
    monkeypatch.setenv("SPECSCOPE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli("cost", "--hw", "h100", "--target", "llama-3.1-8b")
