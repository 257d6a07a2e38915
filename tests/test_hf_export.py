"""The zoo's Transformers export as Hugging Face Llama folders that transformers runs alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specscope.errors import InputError
from specscope.models.torch.hf_export import export_llama
from specscope.models.zoo import load_zoo_model, load_zoo_tokenizer, zoo_specs

torch.set_num_threads(1)
TEXT = "def add(a, b):\n    return a + b  # ünïcode\n<|endoftext|>import os\n"


@pytest.mark.parametrize("name", ["tiny-code", "tiny-code-draft"])
def test_an_exported_zoo_model_gives_the_same_logits_in_transformers(name: str,
                                                                     tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    folder = export_llama(name, tmp_path / name)
    theirs = LlamaForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    ours = load_zoo_model(name)[0]
    random = torch.randint(0, ours.spec.vocab_size, (2, 60),
                           generator=torch.Generator().manual_seed(0))
    text = torch.tensor(load_zoo_tokenizer().encode(TEXT))
    for tokens in (random, text[None]):
        ours.setup_caches(tokens.shape[0], tokens.shape[1])
        with torch.no_grad():
            expected = ours.prefill(tokens)
            got = theirs(input_ids=tokens).logits
        assert (got - expected).abs().max() <= 1e-4
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind


def test_an_exported_folder_tokenizes_like_the_zoo(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = export_llama("tiny-code-draft", tmp_path / "draft")
    theirs = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ids = load_zoo_tokenizer().encode(TEXT)
    assert theirs(TEXT)["input_ids"] == ids
    assert theirs.decode(ids) == TEXT


def test_exporting_over_a_folder_replaces_it_whole(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    export_llama("tiny-code-draft", folder)
    (folder / "stale.txt").write_text("from an earlier export")
    export_llama("tiny-code", folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == zoo_specs()["tiny-code"].n_layers
    assert not (folder / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_state_space_model_does_not_export_as_llama(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="Mamba2 \\(tiny-ssm\\)"):
        export_llama("tiny-ssm", tmp_path / "ssm")
    assert list(tmp_path.iterdir()) == []
