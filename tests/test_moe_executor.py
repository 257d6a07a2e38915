"""A mixture-of-experts Transformer in the executor: greedy speculative decoding equals
autoregressive decoding token for token; the batched expert dispatch equals a per-token loop and
runs only the experts the tokens chose; runtimes other than eager are refused; an expert issues
about the ATen calls the pricing's eager host term (`EXPERT_HOST_LAYERS`) says.

The target has tiny-code's zoo shape (4 layers of width 256, 4 heads of 64, vocabulary 2,048)
with layers 1–3 a mixture of 8 experts of width 172, top-2, beside one shared expert of the
same width (layer 0 dense, d_ff 688); random weights in float64, as the other lossless tests.
"""

from __future__ import annotations

import pytest
import torch
from tiny_pair import noisy_copy, self_repeating_prompts
from torch.utils._python_dispatch import TorchDispatchMode

from specscope.errors import InputError
from specscope.executor.drafters import make_drafter
from specscope.executor.generate import calibration
from specscope.executor.loop import decode_autoregressive, decode_speculative, speculative_generate
from specscope.executor.methods import resolve_method
from specscope.executor.runtime import Runtime
from specscope.executor.targets import CachedModel, Model, wrap
from specscope.models.moe_ops import EXPERT_HOST_LAYERS
from specscope.models.spec import ModelSpec
from specscope.models.torch import Transformer
from specscope.models.torch.moe import MoEFeedForward
from specscope.tree import Tree

torch.set_num_threads(1)

MOE = ModelSpec(name="tiny-code-moe", arch="transformer", n_layers=4, d_model=256,
                vocab_size=2048, n_heads=4, n_kv_heads=4, head_dim=64, d_ff=688,
                tie_embeddings=True, n_experts=8, experts_per_token=2, d_expert=172,
                d_shared=172, first_dense_layers=1, max_seq_len=128)
MAX_NEW = 12
BUDGET = 10


@pytest.fixture(scope="module")
def moe() -> Transformer:
    return Transformer.random(MOE, seed=0, dtype=torch.float64, std=0.05)


@pytest.fixture(scope="module")
def target(moe: Transformer) -> Model:
    return wrap(moe)


@pytest.fixture(scope="module")
def prompts(target: Model) -> list[list[int]]:
    return self_repeating_prompts(target, 8)


@pytest.mark.parametrize(("drafter_name", "algo"),
                         [("ngram", "sequoia"), ("draft", "sequoia"), ("draft", "chain")])
def test_moe_greedy_speculative_equals_autoregressive(moe: Transformer, target: Model,
                                                      prompts: list[list[int]],
                                                      drafter_name: str, algo: str) -> None:
    draft = wrap(noisy_copy(moe, MOE), "draft") if drafter_name == "draft" else None
    drafter = make_drafter(drafter_name, MOE.vocab_size, draft, target=target)
    calibrate = calibration(target, draft, prompts[-2:], MAX_NEW, 0.0, 0, "test prompts")
    method = resolve_method(algo, BUDGET, drafter, calibrate)
    accepted = []
    for prompt in prompts[:-2]:
        run = decode_speculative(target, drafter, method, prompt, MAX_NEW)
        assert run.output == decode_autoregressive(target, prompt, MAX_NEW).output
        accepted.extend(run.accepted)
    assert max(accepted) >= 2  # deep paths were verified and compacted


def test_moe_generate_reports_lossless(moe: Transformer, target: Model,
                                       prompts: list[list[int]]) -> None:
    draft = wrap(noisy_copy(moe, MOE), "draft")
    drafter = make_drafter("draft", MOE.vocab_size, draft, target=target)
    calibrate = calibration(target, draft, prompts[-2:], MAX_NEW, 0.0, 0, "test prompts")
    result = speculative_generate(target, drafter, resolve_method("sequoia", BUDGET, drafter,
                                                                  calibrate),
                                  prompts[:3], MAX_NEW, verify_lossless=True, threads=1)
    assert result.lossless and result.mismatches == 0


def per_token(layer: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """The MoE output of each row of x (t, d) alone: its own top-k, its k experts summed."""
    rows = []
    for token in x.split(1):
        experts, weights = layer.route(token)
        y = sum(w * layer.experts[int(e)](token) for e, w in zip(experts[0], weights[0],
                                                                 strict=True))
        rows.append(y + layer.shared_experts(token))
    return torch.cat(rows)


def test_moe_forward_equals_the_per_token_loop_and_runs_only_chosen_experts(
        moe: Transformer) -> None:
    layer = moe.model.layers[1].mlp
    x = torch.randn(2, 16, MOE.d_model, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    calls = [0] * MOE.n_experts
    hooks = [e.register_forward_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
             for i, e in enumerate(layer.experts)]
    try:
        with torch.no_grad():
            y = layer(x)
            chosen = set(layer.route(x.view(-1, MOE.d_model))[0].flatten().tolist())
            assert calls == [int(i in chosen) for i in range(MOE.n_experts)]
            one = layer(x[:1, :1])  # a decode step runs its k experts only
            assert sum(calls) == len(chosen) + MOE.experts_per_token
            torch.testing.assert_close(y.view(-1, MOE.d_model),
                                       per_token(layer, x.view(-1, MOE.d_model)),
                                       rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(one, y[:1, :1], rtol=1e-12, atol=1e-12)
            assert torch.equal(layer(x), y)  # deterministic
    finally:
        for hook in hooks:
            hook.remove()


def test_routing_renormalises_the_top_k_softmax(moe: Transformer) -> None:
    """Qwen3-MoE's softmax over all experts, top-k, renormalised: Mixtral's softmax over the
    top-k logits."""
    layer = moe.model.layers[2].mlp
    x = torch.randn(5, MOE.d_model, dtype=torch.float64)
    with torch.no_grad():
        experts, weights = layer.route(x)
        logits = layer.gate(x).gather(1, experts)
    torch.testing.assert_close(weights, logits.softmax(-1))
    assert (weights[:, 0] >= weights[:, 1]).all()


def test_only_moe_layers_from_first_dense_layers_on(moe: Transformer) -> None:
    kinds = [type(block.mlp).__name__ for block in moe.model.layers]
    assert kinds == ["FeedForward"] + ["MoEFeedForward"] * 3


def test_moe_refuses_static_runtimes() -> None:
    model = Transformer.random(MOE, std=0.05)
    with pytest.raises(InputError, match="runs under --runtime eager only"):
        CachedModel(model, MOE.name, MOE.vocab_size, Runtime(torch.device("cpu"), torch.float32,
                                                              "compile"))


class AtenCalls(TorchDispatchMode):
    """Counts the ATen operators dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_an_experts_aten_calls_over_a_dense_layers_agree_with_the_host_term(
        moe: Transformer, monkeypatch: pytest.MonkeyPatch) -> None:
    """EXPERT_HOST_LAYERS was measured (benchmarks/moe_cpu.py --host); counting the ATen calls
    of one more touched expert over those of a dense layer's verify step (layer 0) agrees."""
    model = wrap(moe)
    model.prefill(torch.arange(9), 12)
    dense = AtenCalls()

    def enter(*_: object) -> None:
        dense.__enter__()

    def leave(*_: object) -> None:
        dense.__exit__(None, None, None)

    block = moe.model.layers[0]
    pre, post = block.register_forward_pre_hook(enter), block.register_forward_hook(leave)
    try:
        model.verify(torch.tensor([5]), Tree.from_parents([-1]))
    finally:
        pre.remove()
        post.remove()
    layer = moe.model.layers[1].mlp
    route = layer.route
    x = torch.randn(2, MOE.d_model, dtype=torch.float64)
    calls = {}
    for chosen in ([[0, 1], [0, 1]], [[0, 1], [2, 3]]):
        monkeypatch.setattr(layer, "route", lambda h, c=chosen: (torch.tensor(c), route(h)[1]))
        with torch.no_grad(), AtenCalls() as counted:
            layer(x)
        calls[len({e for pair in chosen for e in pair})] = counted.calls
    per_expert = (calls[4] - calls[2]) / 2
    assert per_expert / dense.calls == pytest.approx(EXPERT_HOST_LAYERS, rel=0.25)
