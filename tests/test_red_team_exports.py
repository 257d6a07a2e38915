"""Red team of the exports (issue 40, items 3 and 5): every name that reaches a printed engine
command, from an option, a tree file, optimize-tree's output, an engine configuration file or a
trace, is refused in one line (exit status 2, nothing written) unless it is a model name, and
every command printed parses (`shlex.split`, or Python's parser for transformers) to exactly
the intended words; an export the engines could not serve (a draft of another vocabulary, a
language model as a head, a zoo model, a tree SGLang never builds) is refused likewise."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from specscope.interop.engine import model_id
from specscope.trace import synth_trace, write_trace
from specscope.tree import Tree

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


def refused(code: int, out: str, err: str, *words: str) -> None:
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
        refused(code, out, err, *words)
        refused(jcode, jout, jerr, *words)
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
    refused(*cli(*args, "-o", out))
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
    refused(*cli(*optimize, "--to", engine), "32,000", "128,256", "llama-68m")
    refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, *pair), "32,000",
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
    refused(*cli(*optimize), word)
    refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, *PAIR,
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
    refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, "--target", target,
                 "--drafter", drafter), "zoo model")


def test_sglang_refuses_a_tree_its_top_k_never_builds(cli, tmp_path: Path) -> None:
    """Root children of ranks 0 and 5: SGLang keeps a node's top-k children, so it would
    verify ranks 0..5 (top-k 6), never this tree; vLLM and TensorRT-LLM refuse it too."""
    tree = tmp_path / "gap.json"
    tree.write_text(Tree.from_rank_paths([(0,), (5,)]).to_json())
    refused(*cli("export", tree, "--to", "sglang", *PAIR), "ranks [0, 5]", "top-k")
    refused(*cli("export", tree, "--to", "vllm", *PAIR))
    refused(*cli("export", tree, "--to", "tensorrt-llm", *PAIR, "--export-method", "Eagle3",
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
    refused(*cli("optimize-tree", "--hw", "h100", "--system", "head", "--target", "llama-3.1-8b",
                 "--acceptance", "0.7,0.2", "--budget", 8, "--to", "vllm", "--export-method",
                 "eagle", "-o", out), "llama-3.1-8b/head", "stand-in")
    assert not out.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_refused_export_writes_nothing(cli, tmp_path: Path, engine: str) -> None:
    out = tmp_path / "config.json"
    refused(*cli("export", engine_tree(tmp_path, engine), "--to", engine, "--target",
                 "llama-3.1-8b", "--drafter", PAYLOADS["quote"], "-o", out), "--drafter")
    assert not out.exists()
