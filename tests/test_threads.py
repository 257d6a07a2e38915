"""torch's intra-op threads: one policy (`executor.threads.choose_threads`) for every command that
runs models, recorded with why; `--threads N` as given. No timing is asserted."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch

from specscope.cli import main
from specscope.errors import InputError
from specscope.executor.threads import (
    SMALL_MODEL_PARAMS,
    Threads,
    choose_threads,
    probe_threads,
    use_threads,
)


@pytest.fixture(autouse=True)
def keep_threads() -> Iterator[None]:
    """Every test leaves torch's thread count as it found it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def generate_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--target", "tiny-code", "--drafter", "ngram", "--algo", "chain",
              "--budget", "4", "--prompts", "builtin:code-edit", "--n", "1", "--output-len", "8",
              "--device", "cpu", "--json", *extra])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    return json.loads(out)


def test_generate_records_the_default_thread_count_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    torch.set_num_threads(2)  # torch's default on a 2-core machine: the policy replaces it
    doc = generate_json(capsys)
    assert doc["threads"] == 1
    assert doc["threads_reason"] == (f"default: 1 for models under "
                                     f"{SMALL_MODEL_PARAMS // 10**6}M parameters")
    assert torch.get_num_threads() == 1


def test_generate_honours_an_explicit_thread_count(capsys: pytest.CaptureFixture[str]) -> None:
    doc = generate_json(capsys, "--threads", "2")
    assert (doc["threads"], doc["threads_reason"]) == (2, "--threads")
    assert torch.get_num_threads() == 2


def test_generate_refuses_zero_threads_in_one_line() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--target", "tiny-code", "--drafter", "ngram", "--algo", "chain",
              "--budget", "4", "--prompts", "builtin:code-edit", "--n", "1", "--threads", "0"])
    assert exc.value.code == 2


def test_the_policy_by_device_and_size() -> None:
    assert choose_threads(3) == Threads(3, "--threads")
    given = Threads(2, "profile: box's steps were measured with 2")
    assert choose_threads(given, "cpu", 10**9) is given
    assert choose_threads(None, "cuda", 8 * 10**9).count == 1
    assert choose_threads(None, "cuda", 8 * 10**9).reason.startswith("default: 1 on cuda")
    small = choose_threads(None, "cpu", SMALL_MODEL_PARAMS - 1, 4096)
    assert small.count == 1 and small.reason.startswith("default: 1 for models under")
    with pytest.raises(InputError, match="--threads"):
        choose_threads(0)


def test_large_cpu_models_are_probed_and_the_probe_restores_torch_threads() -> None:
    torch.set_num_threads(1)
    probed = probe_threads(128, counts=(1, 2))
    assert probed.count in (1, 2) and probed.reason.startswith("probe: ")
    assert "1: " in probed.reason and "2: " in probed.reason
    assert torch.get_num_threads() == 1
    assert probe_threads(128, counts=(1,)) == Threads(1, "probe: one core available")
    big = choose_threads(None, "cpu", SMALL_MODEL_PARAMS, 128)
    assert big.reason.startswith("probe: ")


def test_use_threads_counts_the_largest_model_and_sets_torch() -> None:
    small = torch.nn.Linear(64, 64)
    chosen = use_threads(None, small, None)
    assert chosen.count == 1 == torch.get_num_threads()
    assert use_threads(2, small).count == 2 == torch.get_num_threads()
