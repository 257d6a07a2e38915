"""benchmarks/gpu_verify.py: the byte floor, the result file and what the GPU image can import."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specscope.errors import InputError
from specscope.models import get_model
from specscope.models.torch import Hybrid, Mamba2, Transformer
from specscope.models.zoo import zoo_specs

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_verify.py"


@pytest.fixture(scope="module")
def gv():
    spec = importlib.util.spec_from_file_location("gpu_verify", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tensor_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_context_bytes_are_the_kv_cache_of_the_context_and_the_recurrent_state(gv):
    zoo = zoo_specs()
    code = Transformer.random(zoo["tiny-code-draft"])
    code.setup_caches(1, 37)
    assert gv.context_bytes(code.spec, torch.float32, 37) == tensor_bytes(code.kv_cache.kv)

    ssm = Mamba2.random(zoo["tiny-ssm"], dtype=torch.bfloat16)
    state = ssm.new_state()
    assert state.ssm.dtype == torch.float32  # the state stays float32 under bf16 weights
    for context in (0, 500):
        assert gv.context_bytes(ssm.spec, torch.bfloat16, context) == tensor_bytes(state.conv,
                                                                                  state.ssm)
    hybrid = Hybrid.random(zoo["tiny-hybrid"])
    hybrid.setup_caches(1, 20)
    state = hybrid.new_state()
    assert gv.context_bytes(hybrid.spec, torch.float32, 20) == tensor_bytes(
        hybrid.kv_cache.kv, state.conv, state.ssm)


def test_two_row_run_writes_the_schema_with_floors_of_weights_and_kv_at_the_copy_rate(gv,
                                                                                     tmp_path):
    threads = torch.get_num_threads()
    try:
        out = gv.main(["--device", "cpu", "--models", "tiny-code-draft", "--contexts", "32",
                       "--ns", "1,2", "--runtimes", "eager", "--prefill", "", "--repeats", "2",
                       "--no-e2e", "-o", str(tmp_path / "r.json")])
    finally:
        torch.set_num_threads(threads)
    data = json.loads(out.read_text())
    assert set(data) == {"provenance", "copy_GBps", "compile_mode", "steps", "prefill", "commit",
                         "e2e", "groups"}
    assert set(data["provenance"]) == {"device", "driver", "torch", "date"}
    assert data["provenance"]["torch"] == torch.__version__
    assert [(s["model"], s["context"], s["n"], s["runtime"]) for s in data["steps"]] == [
        ("tiny-code-draft", 32, 1, "eager"), ("tiny-code-draft", 32, 2, "eager")]
    assert all(set(s) == {"model", "context", "n", "runtime", "ms", "floor_ms"} and s["ms"] > 0
               for s in data["steps"])
    assert data["prefill"] == data["commit"] == data["e2e"] == []
    assert [(g["model"], g["context"], g["runtime"], g["ns"]) for g in data["groups"]] == [
        ("tiny-code-draft", 32, "eager", [1, 2])]
    s = zoo_specs()["tiny-code-draft"]
    attn = s.n_heads * s.head_dim
    per_layer = 2 * s.d_model * attn + 2 * s.d_model * s.n_kv_heads * s.head_dim \
        + 3 * s.d_model * s.d_ff + 2 * s.d_model
    params = s.vocab_size * s.d_model * (1 if s.tie_embeddings else 2) \
        + s.n_layers * per_layer + s.d_model
    kv = s.n_layers * 2 * s.n_kv_heads * s.head_dim * 32
    expected = 4 * (params + kv) / (data["copy_GBps"] * 1e9) * 1e3
    assert [s["floor_ms"] for s in data["steps"]] == pytest.approx([expected] * 2, rel=1e-12)


def test_merge_keeps_earlier_rows_replaces_remeasured_ones_and_rescales_floors(gv, tmp_path):
    path = tmp_path / "r.json"
    prov = {"device": "GPU X", "driver": "1", "torch": "2.11", "date": "2026-01-01"}
    row = {"model": "m", "context": 256, "n": 1, "runtime": "graph", "ms": 3.0, "floor_ms": 2.0}
    other = {**row, "n": 2, "ms": 4.0}
    first = gv.Results(path, prov, 10.0)
    first.add("steps", row)
    first.add("steps", other)
    merged = gv.Results(path, {**prov, "date": "2026-01-02"}, 20.0, merge=True)
    assert [r["floor_ms"] for r in merged.data["steps"]] == [1.0, 1.0]  # 2 ms at half the rate
    merged.add("steps", {**row, "ms": 2.5, "floor_ms": 1.0})
    on_disk = json.loads(path.read_text())
    assert on_disk["copy_GBps"] == 20.0
    assert sorted((r["n"], r["ms"]) for r in on_disk["steps"]) == [(1, 2.5), (2, 4.0)]
    with pytest.raises(InputError, match="GPU X"):
        gv.Results(path, {**prov, "device": "GPU Y"}, 20.0, merge=True)


def test_narrowed_catalogue_transformer_keeps_its_head_size(gv):
    base, small = get_model("llama-3.2-1b"), gv.spec_of("llama-3.2-1b/4")
    assert small.head_dim == base.head_dim
    assert small.n_heads * small.head_dim == small.d_model == base.d_model // 4
    assert (small.n_layers, small.n_kv_heads, small.d_ff, small.vocab_size) == (
        base.n_layers // 4, base.n_kv_heads // 4, base.d_ff // 4, base.vocab_size // 4)
    with pytest.raises(InputError):
        gv.spec_of("mamba2-2.7b/4")


def test_binary_tree_parents_are_heap_order(gv):
    tree = gv.binary_tree(7)
    assert list(tree.parents) == [-1, 0, 0, 1, 1, 2, 2]
    assert tree.path(6) == [0, 2, 6]


def test_graph_runtime_on_cpu_is_refused_before_anything_runs(gv):
    with pytest.raises(InputError, match="graph"):
        gv.parse_args(["--device", "cpu", "--runtimes", "eager,graph"])


def test_imports_without_the_packages_the_gpu_image_lacks():
    blocked = ("polars", "pulp", "simpy", "plotly")
    code = (f"import sys, importlib.util\n"
            f"for m in {blocked!r}: sys.modules[m] = None\n"
            f"spec = importlib.util.spec_from_file_location('gv', {str(SCRIPT)!r})\n"
            f"gv = importlib.util.module_from_spec(spec); spec.loader.exec_module(gv)\n"
            f"print(gv.missing(gv.E2E_NEEDS))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['polars']"  # PuLP is imported only where ETS solves


def test_compiled_steps_run_at_one_context_and_their_own_sizes(gv):
    args, base = gv.parse_args(["--device", "cpu", "--contexts", "64,256", "--ns", "1,2,4",
                                "--compile-ns", "1", "--compile-mode",
                                "max-autotune-no-cudagraphs"])
    assert (args.compile_context, args.compile_ns, args.warmup) == (64, [1], 3)
    assert base.compile_mode == "max-autotune-no-cudagraphs"
    with pytest.raises(SystemExit):  # argparse: a mode that captures CUDA graphs itself
        gv.parse_args(["--device", "cpu", "--compile-mode", "reduce-overhead"])
    assert gv.pairs("tiny-code:draft, tiny-ssm:ngram") == [("tiny-code", "draft"),
                                                           ("tiny-ssm", "ngram")]
    with pytest.raises(InputError):
        gv.pairs("tiny-code")
