"""One `Deployment`, built once: only `hw_profiles/deployment.py` reads engine files and resolves
what an engine implies; every command and library path reads the resolved fields."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.hw_profiles.deployment import deployment

PACKAGE = Path(__file__).resolve().parent.parent / "specscope"
BUILDER = PACKAGE / "hw_profiles" / "deployment.py"
LOADER = PACKAGE / "hw_profiles" / "engine.py"
RESOLVING = {"load_engine", "for_engine", "default_draft_tp", "baseline_engine",
             "under_attention", "default_batch"}
"""The engine loader and the resolutions the builder owns: reading an engine file, an engine's
baseline, a draft's default devices, the scheduler's default batch (and the piecemeal helpers
they replaced, which must not come back)."""


def _calls(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every call in `path` to a function or method named in `RESOLVING`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in RESOLVING:
                found.append((node.lineno, name))
    return found


def test_only_the_deployment_builder_resolves_engines_and_runtimes() -> None:
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}()"
                 for path in sorted(PACKAGE.rglob("*.py")) if path not in (BUILDER, LOADER)
                 for line, name in _calls(path)]
    assert not offenders, "resolve engines in hw_profiles/deployment.py only:\n" + "\n".join(
        offenders)
    assert {name for _, name in _calls(BUILDER)} >= {"load_engine"}


def test_the_walk_sees_a_call_it_must_refuse(tmp_path: Path) -> None:
    sneaky = tmp_path / "x.py"
    sneaky.write_text("from specscope.hw_profiles import engine\n"
                      "runtime = engine.load_engine('vllm').target_runtime\n")
    assert _calls(sneaky) == [(2, "load_engine")]


def test_an_engine_fills_what_is_not_stated_and_yields_to_what_is() -> None:
    vllm = deployment("h100", engine="vllm", tp=4)
    assert vllm.runtime == vllm.engine.target_runtime and vllm.draft_tp == 4
    assert vllm.baseline_engine is vllm.engine and vllm.baseline_runtime == vllm.runtime
    assert vllm.tree_attention == vllm.engine.tree_attention
    stated = deployment("h100", engine="vllm", tp=4, runtime="eager", draft_tp=1,
                        tree_attention="dense")
    assert (stated.runtime, stated.draft_tp, stated.tree_attention) == ("eager", 1, "dense")
    assert stated.stated == {"tree_attention", "draft_tp"}
    plain = deployment("h100", tp=4)
    assert plain.engine is None and plain.draft_tp == 1 and plain.tree_attention == "split"
    assert deployment("h100", baseline_engine="hf-eager").engine.name == "specscope"


def test_the_scheduler_limit_is_the_engines_unless_stated() -> None:
    sglang = deployment("h100", engine="sglang")
    assert sglang.max_batch_for(True) == sglang.engine.max_batch_speculative
    assert sglang.max_batch_for(False) == sglang.engine.max_batch
    assert deployment("h100", engine="sglang", max_batch=8).max_batch_for(True) == 8
    assert deployment("h100").max_batch_for(True) is None


@pytest.mark.parametrize(("stated", "option"), [
    ({"tp": 0}, "--tp"), ({"batch": 0}, "--batch"), ({"draft_window": 0}, "--draft-window"),
    ({"max_batch": 0}, "--max-batch"), ({"offload": 1.5}, "--offload"),
    ({"engine": "turbo"}, "--engine")])
def test_an_impossible_deployment_names_its_option(stated: dict, option: str) -> None:
    with pytest.raises(InputError, match=option):
        deployment("h100", **stated)


def test_a_draft_option_needs_a_draft_model() -> None:
    with pytest.raises(InputError, match="--draft-window prices a draft model"):
        deployment("h100", draft_window=64).draft_spec(None)
    assert deployment("h100", draft_tp=1).draft_spec(None) is None
