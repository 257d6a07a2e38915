"""Device, dtype and runtime: checked combinations, padded buckets that change no decision, and
compiled steps equal to eager ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tiny_pair import noisy_copy

from specscope.cli import main
from specscope.errors import InputError
from specscope.executor.drafters import DRAFTERS, make_drafter
from specscope.executor.generate import calibration, with_branches
from specscope.executor.loop import decode_autoregressive, decode_speculative
from specscope.executor.methods import resolve_method
from specscope.executor.runtime import Runtime, StepRunner, bucket
from specscope.executor.targets import CachedModel, Model, SSMModel
from specscope.models.spec import ModelSpec
from specscope.models.torch import Mamba2, Transformer
from specscope.tree import Tree

torch.set_num_threads(1)

V = 53
LLAMA = ModelSpec(name="tiny-llama", arch="transformer", n_layers=2, d_model=32, vocab_size=V,
                  n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48, max_seq_len=96)
MAMBA = ModelSpec(name="tiny-mamba2", arch="ssm", n_layers=2, d_model=32, vocab_size=V,
                  d_state=16, ssm_heads=8, ssm_head_dim=8, ssm_groups=2)
METHODS = ("sequoia", "dyspec", "specdecpp", "goose", "chain", "kary")
BUDGET = 11
MAX_NEW = 12
NO_CUDA = not torch.cuda.is_available()


def test_bucket_is_the_next_power_of_two() -> None:
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 100)] == [
        1, 2, 4, 4, 8, 8, 16, 16, 32, 128]


@pytest.mark.skipif(not NO_CUDA, reason="checks the defaults of a machine without a GPU")
def test_defaults_without_a_gpu_are_eager_float32_on_the_cpu() -> None:
    chosen = Runtime.resolve()
    assert (chosen.device.type, chosen.dtype, chosen.kind) == ("cpu", torch.float32, "eager")
    assert Runtime.resolve("cpu", "bfloat16", "compile").describe() == {
        "device": "cpu", "dtype": "bfloat16", "runtime": "compile"}


@pytest.mark.parametrize(
    ("device", "dtype", "runtime", "needle"),
    [
        ("cpu", "float32", "graph", "--runtime graph"),
        ("tpu", "float32", None, "--device"),
        ("cpu", "float64", None, "--dtype"),
        ("cpu", "float32", "jit", "--runtime"),
        pytest.param("cuda", "float32", None, "no CUDA GPU",
                     marks=pytest.mark.skipif(not NO_CUDA, reason="a GPU is visible")),
    ],
)
def test_impossible_combinations_are_input_errors(device: str, dtype: str, runtime: str | None,
                                                  needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        Runtime.resolve(device, dtype, runtime)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    def _run(*args: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        return int(exc.value.code or 0), capsys.readouterr().err

    return _run


@pytest.mark.parametrize(
    "options",
    [
        ["--device", "cpu", "--runtime", "graph"],
        ["--runtime", "cudagraph"],
        ["--dtype", "int8"],
        pytest.param(["--device", "cuda"],
                     marks=pytest.mark.skipif(not NO_CUDA, reason="a GPU is visible")),
    ],
)
@pytest.mark.parametrize("command", ["generate", "collect"])
def test_bad_device_or_runtime_is_one_line_exit_2(run, tmp_path: Path, command: str,
                                                  options: list[str]) -> None:
    out = tmp_path / "trace.parquet"
    args = {
        "generate": ["generate", "--target", "tiny-code", "--drafter", "ngram", "--algo", "chain",
                     "--budget", "4", "--prompts", "builtin:code-edit", "--n", "1"],
        "collect": ["collect", "--target", "tiny-code", "--prompts", "builtin:code-edit", "--n",
                    "1", "-o", str(out)],
    }[command]
    code, err = run(*args, *options)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


# ---- padded buckets ------------------------------------------------------------------------


def repeating_prompts(target: Model, count: int) -> list[list[int]]:
    """Prompts `start + continuation(start) + start`, whose continuations tend to copy."""
    g = torch.Generator().manual_seed(1)
    prompts = []
    for _ in range(count):
        start = torch.randint(0, V, (5,), generator=g).tolist()
        prompts.append(start + decode_autoregressive(target, start, 8).output + start)
    return prompts


class Pair:
    """The same target and draft wrapped twice: exact shapes, and padded to buckets (a
    Transformer target, or a Mamba-2 one verified by STree; the draft is a Transformer)."""

    def __init__(self, ssm: bool = False) -> None:
        base = Transformer.random(LLAMA, seed=0, dtype=torch.float64, std=0.2)
        draft = noisy_copy(base, base.spec)
        cpu = Runtime(torch.device("cpu"), torch.float64)
        if ssm:
            target = Mamba2.random(MAMBA, seed=0, dtype=torch.float64, std=0.3)
            exact, padded = SSMModel(target, "t", runtime=cpu), SSMModel(target, "t",
                                                                          runtime=cpu,
                                                                          padded=True)
        else:
            exact, padded = (CachedModel(base, "t", V, cpu),
                             CachedModel(base, "t", V, cpu, padded=True))
        self.exact = (exact, CachedModel(draft, "d", V, cpu))
        self.padded = (padded, CachedModel(draft, "d", V, cpu, padded=True))
        prompts = repeating_prompts(self.exact[0], 10)
        self.prompts, self.others = prompts[:6], prompts[6:]

    def decode(self, models: tuple[Model, Model], drafter_name: str, algo: str):
        target, draft = models
        drafter = make_drafter(drafter_name, V, draft, target=target)
        if algo == "goose":
            drafter = with_branches(drafter, V)
        calibrate = calibration(target, draft, self.others, MAX_NEW, 0.0, 0, "test prompts")
        method = resolve_method(algo, BUDGET, drafter, calibrate)
        return [decode_speculative(target, drafter, method, p, MAX_NEW) for p in self.prompts]


@pytest.fixture(scope="module")
def pair() -> Pair:
    return Pair()


@pytest.fixture(scope="module")
def ssm_pair() -> Pair:
    return Pair(ssm=True)


@pytest.mark.parametrize("algo", METHODS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_padding_changes_no_accept_decision_and_no_token(pair: Pair, drafter: str,
                                                         algo: str) -> None:
    exact = pair.decode(pair.exact, drafter, algo)
    padded = pair.decode(pair.padded, drafter, algo)
    reference = [decode_autoregressive(pair.exact[0], p, MAX_NEW).output for p in pair.prompts]
    assert [r.output for r in padded] == reference
    assert [r.accepted for r in padded] == [r.accepted for r in exact]
    assert [r.tree_sizes for r in padded] == [r.tree_sizes for r in exact]


@pytest.mark.parametrize("algo", ["sequoia", "dyspec", "chain"])
@pytest.mark.parametrize("drafter", ["draft", "ngram", "goose"])
def test_padding_an_ssm_target_changes_no_accept_decision_and_no_token(
        ssm_pair: Pair, drafter: str, algo: str) -> None:
    test_padding_changes_no_accept_decision_and_no_token(ssm_pair, drafter, algo)


def test_padded_logits_equal_exact_ones_on_a_bushy_tree(pair: Pair) -> None:
    exact, padded = pair.exact[0], pair.padded[0]
    prompt = pair.prompts[0]
    tree = Tree.from_parents([-1, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])  # 13 nodes: bucket 16
    tokens = torch.arange(tree.size) % V
    for model in (exact, padded):
        model.prefill(torch.tensor(prompt), len(prompt) + 20)
    assert torch.allclose(padded.verify(tokens, tree), exact.verify(tokens, tree), atol=1e-10)


# ---- compiled steps ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_compiled_step_equals_the_eager_one_and_compiles_once_per_bucket() -> None:
    model = Transformer.random(LLAMA, seed=3, std=0.2)
    compiled = CachedModel(model, "t", V, Runtime(torch.device("cpu"), torch.float32,
                                                  "compile"))
    reference = CachedModel(Transformer.random(LLAMA, seed=3, std=0.2), "t", V)
    prompt = torch.arange(20) % V
    trees = [Tree.chain(2), Tree.from_parents([-1, 0, 0, 1, 1, 2, 2]), Tree.chain(3)]  # 4, 8, 4
    for model_ in (compiled, reference):
        model_.prefill(prompt, 60)
    for tree in trees:
        tokens = torch.arange(tree.size) % V
        got, want = compiled.verify(tokens, tree), reference.verify(tokens, tree)
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        compiled.commit(tokens, [0, 1])
        reference.commit(tokens, [0, 1])
    assert compiled.setup_s > 0
    assert len(compiled._step._seen) == 2


def test_a_step_runner_under_eager_calls_through() -> None:
    calls = []
    runner = StepRunner(lambda x: calls.append(x) or x + 1, Runtime.cpu())
    assert runner(torch.tensor([1])).item() == 2 and len(calls) == 1
    assert runner.setup_s == 0.0


# ---- Hugging Face folders --------------------------------------------------------------------


def test_a_llama_folder_runs_as_specscopes_own_transformer(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from specscope.executor.targets import load_model
    from specscope.models.torch.hf import HFCausalLM

    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, rope_theta=5000.0,
                         max_position_embeddings=128, initializer_range=0.2)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    ours, _ = load_model(str(tmp_path))
    assert isinstance(ours, CachedModel) and isinstance(ours.model, Transformer)
    assert ours.model.spec.rope_theta == 5000.0
    theirs = CachedModel(HFCausalLM(tmp_path), "hf", V)
    prompt = torch.arange(30) % V
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2])
    tokens = torch.arange(tree.size) + 3
    for model in (ours, theirs):
        model.prefill(prompt, 40)
    assert torch.allclose(ours.verify(tokens, tree), theirs.verify(tokens, tree), atol=1e-5)


@pytest.mark.slow
def test_a_compiled_ssm_decodes_what_the_eager_one_does() -> None:
    model = Mamba2.random(MAMBA, seed=1, std=0.3)
    compiled = SSMModel(model, "t", runtime=Runtime(torch.device("cpu"), torch.float32,
                                                    "compile"))
    eager = SSMModel(model, "t")
    prompt = torch.arange(12) % V
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2])  # bucket 8
    tokens = torch.arange(tree.size) % V + 2
    for wrapped in (compiled, eager):
        wrapped.prefill(prompt, 40)
    torch.testing.assert_close(compiled.verify(tokens, tree), eager.verify(tokens, tree),
                               atol=1e-4, rtol=0)
    for wrapped in (compiled, eager):
        wrapped.commit(tokens, [0, 1, 3])
    torch.testing.assert_close(compiled.decode(7), eager.decode(7), atol=1e-4, rtol=0)
    assert compiled.setup_s > 0
