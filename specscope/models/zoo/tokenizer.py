"""The zoo's tokenizer: byte-level BPE with 2048 symbols, trained on the training corpus.

Byte-level BPE (GPT-2's pre-tokenizer, no normaliser) encodes any text and decodes it back
exactly. On held-out stdlib code it averages about 3 bytes a token against 1 for plain bytes, so
a model with the same compute sees three times the text and context; losses are still reported in
bits per byte, which does not depend on the tokenizer. `<|endoftext|>` (id 0) separates files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from specscope.atomic import write_atomic
from specscope.errors import InputError

VOCAB_SIZE = 2048
EOT = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"


class ZooTokenizer:
    """Text ↔ token ids for the zoo models (a thin wrapper over a `tokenizers.Tokenizer`)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.eot_id = tokenizer.token_to_id(EOT)

    @classmethod
    def load(cls, path: str | Path) -> ZooTokenizer:
        """Read a tokenizer JSON file written by `save`."""
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as exc:  # tokenizers raises a bare Exception for missing or bad files
            raise InputError(f"{path}: cannot load tokenizer ({exc})") from None

    def save(self, path: str | Path) -> Path:
        """Write the tokenizer JSON atomically; returns the path."""
        return write_atomic(path, lambda tmp: self.tokenizer.save(str(tmp)))

    @property
    def vocab_size(self) -> int:
        """Number of token ids, specials included."""
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added)."""
        return self.tokenizer.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, encoded in parallel."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; `decode(encode(text)) == text` for every string."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self) -> list[int]:
        """UTF-8 bytes each id stands for (0 for `<|endoftext|>`), to turn bits into bits/byte."""
        specials = {self.eot_id}
        # A byte-level vocabulary spells every byte as one character.
        return [
            0 if i in specials else len(self.tokenizer.id_to_token(i))
            for i in range(self.vocab_size)
        ]


def train_tokenizer(texts: Sequence[str], vocab_size: int = VOCAB_SIZE) -> ZooTokenizer:
    """A byte-level BPE of `vocab_size` ids learnt from `texts` (the same texts, the same BPE)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return ZooTokenizer(tokenizer)
