"""The model zoo: corpus split, tokenizer, shipped weights, prompt sets and prompt files."""

from __future__ import annotations

import ast
import hashlib
import re
import sqlite3
from functools import cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.errors import InputError
from specscope.models.torch import Mamba2, Transformer
from specscope.models.zoo import (
    ZOO_SOURCE,
    load_zoo_model,
    load_zoo_tokenizer,
    zoo_report,
    zoo_specs,
)
from specscope.models.zoo.data import (
    EXCLUDED_DIRS,
    HELD_OUT_MODULES,
    corpus_modules,
    corpus_texts,
    read_module,
    split_modules,
)
from specscope.models.zoo.prompts import (
    PROMPT_SET_SIZES,
    edit_documents,
    edit_example,
    load_prompts,
    module_functions,
)
from specscope.models.zoo.sql import SHOTS
from specscope.models.zoo.train import (
    eval_windows,
    evaluate,
    sequence_logits,
    token_stream,
    top1_agreement,
)

ZOO_MODELS = ("tiny-code", "tiny-code-draft", "tiny-ssm", "tiny-hybrid")
SLICE_WINDOWS = 3
"""Held-out windows of the quick check, evenly spaced over the held-out stream."""


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads, and two test workers on two cores oversubscribe."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@cache
def heldout_slice() -> torch.Tensor:
    """A few 512-token held-out windows spread over all held-out modules."""
    stream = token_stream(load_zoo_tokenizer(), corpus_texts("heldout"))
    return eval_windows(stream, 512, SLICE_WINDOWS)


@cache
def model(name: str) -> Transformer | Mamba2:
    return load_zoo_model(name)[0]


def greedy(m: Transformer | Mamba2, prompt: list[int], n: int) -> list[int]:
    """`n` greedy tokens after `prompt`, decoded one token at a time from the model's cache."""
    tokens = torch.tensor([prompt])
    out: list[int] = []
    if isinstance(m, Mamba2):
        logits, state = m.prefill(tokens)
        for _ in range(n):
            out.append(int(logits[0, -1].argmax()))
            step_logits, state = m.step(torch.tensor([out[-1]]), state)
            logits = step_logits[:, None]
        return out
    m.setup_caches(1, len(prompt) + n)
    logits = m.prefill(tokens)
    for pos in range(len(prompt), len(prompt) + n):
        out.append(int(logits[0, -1].argmax()))
        logits = m(torch.tensor([[out[-1]]]), torch.tensor([pos]))
    return out


# --- corpus -------------------------------------------------------------------------------------


def test_split_is_disjoint_and_covers_the_corpus():
    train, heldout = split_modules()
    assert not set(train) & set(heldout)
    assert sorted(train + heldout) == corpus_modules()
    assert heldout == sorted(HELD_OUT_MODULES)
    assert train == sorted(train)


def test_corpus_leaves_out_test_suites_and_idlelib():
    for name in corpus_modules():
        assert not EXCLUDED_DIRS & set(name.split("/")[:-1]), name
    assert "json/decoder.py" in corpus_modules()


# --- tokenizer ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_tokenizer_round_trips_arbitrary_text(text):
    tokenizer = load_zoo_tokenizer()
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_token_bytes_add_up_to_the_utf8_length():
    tokenizer = load_zoo_tokenizer()
    text = read_module("calendar.py") + "naïve ✓ 🎉"
    lengths = tokenizer.token_bytes()
    assert sum(lengths[i] for i in tokenizer.encode(text)) == len(text.encode())
    assert tokenizer.vocab_size <= 2048


# --- shipped weights ----------------------------------------------------------------------------


def test_zoo_specs_match_the_shipped_tokenizer():
    specs = zoo_specs()
    assert sorted(specs) == sorted(ZOO_MODELS)
    for spec in specs.values():
        assert spec.vocab_size == load_zoo_tokenizer().vocab_size
        assert spec.source == ZOO_SOURCE
    params = {name: sum(p.numel() for p in model(name).parameters()) for name in ZOO_MODELS}
    assert params["tiny-code"] >= 8 * params["tiny-code-draft"]
    for name in ZOO_MODELS:
        assert zoo_report(name)["params"] == params[name]


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_shipped_weights_reproduce_the_recorded_heldout_bits_per_byte(name):
    token_bytes = torch.tensor(load_zoo_tokenizer().token_bytes())
    measured = evaluate(model(name), heldout_slice(), token_bytes).bits_per_byte
    recorded = zoo_report(name)["heldout_bits_per_byte"]
    assert measured == pytest.approx(recorded, rel=0.15)


def test_draft_agrees_with_its_target_as_recorded():
    recorded = zoo_report("tiny-code-draft")["top1_agreement"]["tiny-code"]
    measured = top1_agreement(model("tiny-code-draft"), model("tiny-code"), heldout_slice())
    assert measured == pytest.approx(recorded, abs=0.08)
    assert measured > 0.4


@pytest.mark.parametrize("name", ["tiny-code", "tiny-ssm"])
def test_greedy_generation_is_deterministic_and_matches_a_full_pass(name):
    prompt = load_zoo_tokenizer().encode(load_prompts("builtin:stdlib-code")[0])[:64]
    first = greedy(model(name), prompt, 8)
    assert greedy(model(name), prompt, 8) == first
    # Teacher-forcing the generated text in one pass gives the same argmax at every position.
    with torch.no_grad():
        full = sequence_logits(model(name), torch.tensor([prompt + first]))
    assert full[0, len(prompt) - 1 : -1].argmax(-1).tolist() == first


# --- prompt sets --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROMPT_SET_SIZES))
def test_builtin_prompt_sets_have_their_size_and_distinct_prompts(name):
    prompts = load_prompts(f"builtin:{name}")
    assert len(prompts) == PROMPT_SET_SIZES[name] >= 64
    assert len(set(prompts)) == len(prompts)


@pytest.mark.parametrize("name", sorted(set(PROMPT_SET_SIZES) - {"sql"}))
def test_stdlib_prompt_sets_come_from_heldout_modules(name):
    prompts = load_prompts(f"builtin:{name}")
    heldout = "\n".join(read_module(m) for m in split_modules()[1])
    for prompt in prompts:
        assert prompt.startswith(("def ", "async def "))
        assert prompt.splitlines()[0].strip() in heldout


def test_code_edit_prompts_hold_the_function_to_copy_and_fit_the_context():
    tokenizer = load_zoo_tokenizer()
    for prompt in load_prompts("builtin:code-edit"):
        original, _, edit = prompt.partition("\n\n# The same function")
        assert edit.splitlines()[1].startswith(("def ", "async def "))
        # the continuation repeats the body, so prompt and copy must fit the 512-token window
        assert 2 * len(tokenizer.encode(original)) + len(tokenizer.encode(edit)) <= 512


SQL_SET_SHA256 = "2b3950335330d8e0c43abd2e0fcb648cf2fc8bd332cf165a0db6b2270ec8c9f4"
"""sha256 of builtin:sql's prompts joined by NUL, as built on the machine that wrote it."""


def test_sql_prompts_are_runnable_few_shot_sql_over_their_schema_and_the_same_everywhere():
    prompts = load_prompts("builtin:sql")
    # random.Random with a str seed hashes it with SHA-512: the same set on every machine
    digest = hashlib.sha256("\0".join(prompts).encode()).hexdigest()
    assert digest == SQL_SET_SHA256
    tokenizer = load_zoo_tokenizer()
    for prompt in prompts:
        head, _, rest = prompt.partition("\n#\n")
        schema, _, asked = rest.partition("\n#\n")
        assert head == "### SQLite SQL tables, with their properties:"
        assert asked.endswith("\nSELECT")
        db = sqlite3.connect(":memory:")
        for line in schema.splitlines():  # "# table(col, ...)"
            table, columns = line.removeprefix("# ").rstrip(")").split("(")
            db.execute(f"CREATE TABLE {table} ({columns})")
        blocks = asked.split("\n\n")
        assert len(blocks) == SHOTS + 1 and all(b.startswith("### ") for b in blocks)
        for shot in blocks[:-1]:
            query = shot.split("\n")[1]
            db.execute(query)  # parses, and names only tables and columns of the schema
        assert len(tokenizer.encode(prompt)) + 64 <= 512  # room for a 64-token continuation


def test_docstring_prompts_stop_a_few_words_into_a_long_docstring():
    for prompt in load_prompts("builtin:docstring"):
        head, _, doc = prompt.partition('"""') if '"""' in prompt else prompt.partition("'''")
        assert head.rstrip("rRuU").rstrip().endswith(":") and doc  # a header, then the docstring
        assert len(doc.split()) == 3 and not doc[-1].isspace()  # ends right after a word


@pytest.mark.parametrize("name", sorted(PROMPT_SET_SIZES))
def test_prompts_end_where_a_line_of_the_continuation_starts(name):
    # the tokenizer merges a newline with the indentation after it, so a prompt ending in a bare
    # newline would ask for a token sequence the models never saw in training
    assert not any(p.endswith("\n") for p in load_prompts(f"builtin:{name}"))


def dump(statements: list[ast.stmt]) -> list[str]:
    return [ast.dump(s) for s in statements]


def test_edit_examples_carry_out_their_edit():
    functions = [f for f in module_functions(["json/decoder.py", "textwrap.py"])
                 if f.statements >= 2 and len(f.lines) >= 4]
    kinds = set()
    for i, f in enumerate(functions):
        prompt, completion = edit_example(f, i)
        instruction, _, header = prompt.removeprefix(f.text + "\n\n").partition("\n")
        original = ast.parse(f.text).body[0]
        edited = ast.parse(header + completion).body[0]
        if "renamed to" in instruction and "parameter" not in instruction:
            kinds.add("rename")
            assert edited.name == instruction.rsplit(" ", 1)[1].rstrip(":") != original.name
            assert dump(edited.body) == dump(original.body)
        elif "parameter" in instruction:
            kinds.add("param")
            old, new = re.findall(r"`(\w+)`", instruction)
            names = {n.id for n in ast.walk(edited) if isinstance(n, ast.Name)}
            assert old not in names and new in names | {a.arg for a in edited.args.args}
        else:
            kinds.add("nodoc")
            assert dump(edited.body) == dump(original.body[1:])
    assert kinds == {"rename", "param", "nodoc"}


def test_edit_documents_are_whole_examples_of_the_given_modules():
    docs = edit_documents(["textwrap.py"])
    assert docs and all("\n\n# The same function" in d for d in docs)
    source = read_module("textwrap.py")
    assert all(d.partition("\n\n# The same function")[0].splitlines()[0].strip() in source
               for d in docs)


# --- prompt files -------------------------------------------------------------------------------


def test_jsonl_prompts_load_in_order_skipping_blank_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "def f():"}\n\n{"prompt": "x = 1", "id": 3}\n')
    assert load_prompts(str(path)) == ["def f():", "x = 1"]


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ('{"prompt": "a"}\n{"prompt": \n', "line 2"),
        ('{"prompt": "a"}\n["a"]\n', "line 2"),
        ('{"text": "a"}\n', "line 1"),
        ('{"prompt": 3}\n', "line 1"),
        ("\n\n", "no prompts"),
    ],
)
def test_malformed_jsonl_names_the_file_and_line(tmp_path, content, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=where) as info:
        load_prompts(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("spec", ["builtin:nope", "missing.jsonl", "prompts.txt"])
def test_bad_prompt_specs_raise_input_error(tmp_path, spec):
    with pytest.raises(InputError, match=spec.split(":")[-1]):
        load_prompts(spec if spec.startswith("builtin:") else str(tmp_path / spec))
