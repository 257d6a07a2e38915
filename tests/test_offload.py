"""Weight offloading (CostModel offload): weights streamed over the host link every forward."""

from __future__ import annotations

import dataclasses

import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.models import get_model
from specscope.models.ops import weight_bytes


def _cost(offload: float = 0.0, overlap: bool = True, hw: str = "a100") -> CostModel:
    return CostModel(load_profile(hw), get_model("llama-2-70b"), offload=offload,
                     offload_overlap=overlap)


def test_no_offload_prices_as_before() -> None:
    plain = CostModel(load_profile("a100"), get_model("llama-2-70b"))
    assert _cost(0.0).forward_time(1, 8, 512) == plain.forward_time(1, 8, 512)


def test_offloaded_weights_stream_over_the_host_link_every_forward() -> None:
    hw = load_profile("a100")
    stream = 0.5 * weight_bytes(get_model("llama-2-70b")) / hw.host_link_bandwidth
    on_device = _cost(0.0).roofline_time(1, 1, 512)
    assert _cost(0.5).forward_time(1, 1, 512) == pytest.approx(max(stream, on_device))
    assert _cost(0.5, overlap=False).forward_time(1, 1, 512) == pytest.approx(
        stream + on_device)


def test_offloading_makes_a_tree_nearly_free_to_verify() -> None:
    streamed, resident = _cost(1.0), _cost(0.0)
    assert streamed.forward_time(1, 64, 512) / streamed.forward_time(1, 1, 512) < 1.01
    assert resident.forward_time(1, 64, 512) / resident.forward_time(1, 1, 512) > 1.05


def test_offloaded_weights_leave_device_memory() -> None:
    full, half = _cost(0.0).memory_bytes(1, 0), _cost(0.5).memory_bytes(1, 0)
    assert half == pytest.approx(full / 2)


@pytest.mark.parametrize("offload, message", [(1.5, r"offload = 1.5 must be a fraction"),
                                              (-0.1, r"offload = -0.1 must be a fraction")])
def test_an_impossible_fraction_is_refused(offload: float, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _cost(offload)


def test_a_profile_without_a_host_link_cannot_offload() -> None:
    hw = dataclasses.replace(load_profile("a100"), host_link_bandwidth=0.0)
    with pytest.raises(InputError, match="host_link_gbs"):
        CostModel(hw, get_model("llama-2-7b"), offload=0.5)


def test_optimize_tree_chooses_bigger_trees_when_weights_stream() -> None:
    from specscope.optimizers.run import OptimizeRequest, run_optimize

    def best_speedup(offload: float, budget: int) -> float:
        result = run_optimize(OptimizeRequest(
            deployment=deployment("l40", target="llama-2-70b", drafter="llama-3.2-1b",
                                  offload=offload),
            acceptance=[0.7, 0.15, 0.05, 0.03], algos="sequoia", budget=budget))
        return result.comparison.scores[0].speedup

    # the more of the weights stream every forward, the cheaper verifying one more token is,
    # so a big tree gains more (0.7: the least of the 70B's 16-bit weights the L40 lets stream)
    fitting = best_speedup(0.7, 128) / best_speedup(0.7, 8)
    streamed = best_speedup(0.9, 128) / best_speedup(0.9, 8)
    assert streamed > fitting > 1.0
    with pytest.raises(InputError, match="do not fit"):
        best_speedup(0.0, 8)


def test_simulate_refuses_offload_with_a_system() -> None:
    from specscope.simulator.run import SimulateRequest, run_simulation

    with pytest.raises(InputError, match="--offload prices the plain target"):
        run_simulation(SimulateRequest(
            deployment=deployment("a100", target="llama-2-7b", offload=0.5),
            rate=1.0, requests=2, seed=0, system="head"))


def test_simulate_serves_an_offloaded_target_slower() -> None:
    from specscope.simulator.run import SimulateRequest, run_simulation

    def tpot(offload: float) -> float:
        return run_simulation(SimulateRequest(
            deployment=deployment("a100", target="llama-2-7b", offload=offload),
            rate=1.0, requests=5, seed=0)).summary["mean_tpot_ms"]

    assert tpot(0.5) > 2 * tpot(0.0)
