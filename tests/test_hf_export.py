"""The zoo's Transformers export as Hugging Face Llama folders that transformers runs alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specscope.errors import InputError
from specscope.models.torch.hf_export import export_llama
from specscope.models.zoo import load_zoo_model, zoo_specs

torch.set_num_threads(1)


@pytest.mark.parametrize("name", ["tiny-code", "tiny-code-draft"])
def test_an_exported_zoo_model_gives_the_same_logits_in_transformers(name: str,
                                                                     tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    ours = load_zoo_model(name)[0]
    folder = export_llama(ours, tmp_path / name)
    theirs = LlamaForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tokens = torch.randint(0, ours.spec.vocab_size, (2, 40), generator=torch.Generator()
                           .manual_seed(0))
    ours.setup_caches(2, 40)
    with torch.no_grad():
        expected = ours.prefill(tokens)
        got = theirs(input_ids=tokens).logits
    assert (got - expected).abs().max() <= 1e-4
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind


def test_a_state_space_model_does_not_export_as_llama(tmp_path: Path) -> None:
    from specscope.models.torch import Mamba2

    with pytest.raises(InputError, match="Mamba2"):
        export_llama(Mamba2.random(zoo_specs()["tiny-ssm"]), tmp_path / "ssm")
    assert not (tmp_path / "ssm").exists()
