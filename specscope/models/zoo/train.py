"""Train the zoo models on the standard library, nanoGPT-style: one plain loop, no framework.

    specscope zoo train [--model NAME|all] [--steps N | --minutes M] [--seed S] [--out DIR]

Each model trains on random windows of the training token stream with AdamW and a cosine
schedule after a linear warm-up. Forward and backward run in bfloat16 (2.5× faster than float32
on CPUs with AVX-512 BF16) against float32 master weights that the optimiser updates. Every
`steps / EVALS` steps the held-out loss is measured; training stops at the step count, or
when the held-out loss has not improved for `PATIENCE` evaluations, and the best checkpoint is
kept. By default each model runs the step count of its shipped weights (`HYPER`), so a run is
reproducible step for step; `--minutes` instead plans the count from a wall-clock budget and the
time of the first steps (and stops at the budget), for a quicker, weaker zoo.

A share of each batch (`Hyper.edit_fraction` of its rows) comes from code-edit examples built
from the training modules' functions (`prompts.edit_documents`: a function, an edit instruction,
the edited function), each window starting at an example: small code models do not carry out an
edit by copying unless they have seen edits, and the agentic editing workload is the one that
`builtin:code-edit` (held-out functions) measures.

The draft is distilled from its target (half data cross-entropy, half KL to the target's
distribution, as in DistillSpec, Zhou et al. 2023): speculative acceptance depends on the two
models agreeing, not on the draft's own loss. Weights are saved as float16 safetensors; the
reported held-out numbers are measured in float32 on the saved weights, and the draft's greedy
top-1 agreement with each target is recorded next to them in `zoo.toml`.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from specscope.atomic import write_atomic, write_text_atomic
from specscope.errors import InputError
from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Mamba2, Transformer
from specscope.models.zoo import (
    ORDER,
    ZOO_DIR,
    ZOO_TOML,
    load_zoo_model,
    read_zoo_tables,
    weights_path,
    zoo_specs,
)
from specscope.models.zoo.data import corpus_texts, split_modules
from specscope.models.zoo.prompts import edit_documents
from specscope.models.zoo.tokenizer import TOKENIZER_FILE, ZooTokenizer, train_tokenizer

TRAIN_DTYPE = torch.bfloat16
SAVE_DTYPE = torch.float16
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
WARMUP_STEPS = 30
MIN_LR_FRACTION = 0.1
EVALS = 24
"""Held-out evaluations per run."""
PATIENCE = 6
"""Evaluations without improvement before stopping early."""
EVAL_WINDOWS = 24
"""Held-out windows of each periodic evaluation (bfloat16)."""
FINAL_EVAL_WINDOWS = 128
"""Held-out windows, evenly spaced over the held-out stream, of the reported float32 numbers."""
TIMING_STEPS = 5
"""Steps timed to plan the step count from the budget."""
PLANNED_FRACTION = 0.92
"""Share of the budget planned for steps; the rest covers evaluations."""


@dataclass(frozen=True)
class Hyper:
    """Training settings of one zoo model."""

    lr: float
    batch: int
    seq_len: int
    steps: int
    """Steps of the shipped weights."""
    teacher: str = ""
    """Zoo model to distil from ("" for none)."""
    agree_with: tuple[str, ...] = ()
    """Targets whose greedy top-1 agreement with this model is recorded."""
    edit_fraction: float = 0.0
    """Share of each batch's rows drawn from the code-edit examples."""


HYPER = {
    "tiny-code": Hyper(lr=2e-3, batch=8, seq_len=512, steps=6000, edit_fraction=0.25),
    "tiny-ssm": Hyper(lr=2e-3, batch=4, seq_len=512, steps=2685, edit_fraction=0.25),
    "tiny-hybrid": Hyper(lr=2e-3, batch=4, seq_len=512, steps=1393, edit_fraction=0.25),
    "tiny-code-draft": Hyper(
        lr=3e-3,
        batch=8,
        seq_len=512,
        steps=2500,
        teacher="tiny-code",
        agree_with=("tiny-code", "tiny-ssm", "tiny-hybrid"),
        edit_fraction=0.25,
    ),
}

TOML_HEADER = """\
# specscope model zoo: tiny models trained on the Python standard library by
# `specscope zoo train`, one table per model. The top-level keys are
# `ModelSpec` fields; `[<name>.training]` is the training report that the script writes.
# Weights: <name>.safetensors beside this file; tokenizer: tokenizer.json.
"""


@dataclass(frozen=True)
class Evaluation:
    """Held-out quality of a model over a set of windows."""

    bits_per_token: float
    bits_per_byte: float
    top1_accuracy: float
    tokens: int


def token_stream(tokenizer: ZooTokenizer, texts: list[str]) -> torch.Tensor:
    """All texts' ids (long), each file followed by `<|endoftext|>`."""
    ids: list[int] = []
    for doc in tokenizer.encode_batch(texts):
        ids.extend(doc)
        ids.append(tokenizer.eot_id)
    return torch.tensor(ids, dtype=torch.long)


def eval_windows(stream: torch.Tensor, seq_len: int, count: int) -> torch.Tensor:
    """`count` windows (count, seq_len + 1) evenly spaced over the non-overlapping windows."""
    available = (stream.numel() - 1) // seq_len
    picks = torch.linspace(0, available - 1, min(count, available)).round().long().unique()
    return torch.stack([stream[i * seq_len : i * seq_len + seq_len + 1] for i in picks.tolist()])


def sequence_logits(model: Transformer | Mamba2 | Hybrid, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (b, t, vocab) of windows (b, t) from an empty context, differentiable.

    The models' public `prefill` runs under `torch.no_grad`; training needs the same pass with
    autograd, so this calls their full-sequence pass (`forward_sequence` after fresh KV caches,
    or the chunked SSD `_chain` from the empty state).
    """
    if isinstance(model, Mamba2):
        hidden, _ = model._chain(tokens, model.new_state(tokens.shape[0]))
        return model.lm_head(hidden)
    return model.forward_sequence(tokens)


@torch.no_grad()
def evaluate(
    model: Transformer | Mamba2 | Hybrid,
    windows: torch.Tensor,
    token_bytes: torch.Tensor,
    batch: int = 8,
) -> Evaluation:
    """Bits per token and per byte of predicting each window's tokens 1.. from those before."""
    nats = correct = 0.0
    for start in range(0, len(windows), batch):
        w = windows[start : start + batch]
        logits = sequence_logits(model, w[:, :-1]).float()
        nats += F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        correct += (logits.argmax(-1) == w[:, 1:]).sum().item()
    tokens = windows[:, 1:].numel()
    n_bytes = token_bytes[windows[:, 1:]].sum().item()
    bits = nats / math.log(2)
    return Evaluation(bits / tokens, bits / n_bytes, correct / tokens, tokens)


@torch.no_grad()
def top1_agreement(
    draft: Transformer | Mamba2 | Hybrid,
    target: Transformer | Mamba2 | Hybrid,
    windows: torch.Tensor,
    batch: int = 8,
) -> float:
    """Share of positions where both models' greedy next token is the same (true prefixes)."""
    same = 0
    for start in range(0, len(windows), batch):
        w = windows[start : start + batch, :-1]
        guess = sequence_logits(draft, w).argmax(-1)
        same += int((guess == sequence_logits(target, w).argmax(-1)).sum())
    return same / windows[:, :-1].numel()


def lr_at(step: int, steps: int, peak: float) -> float:
    """Learning rate of `step`: linear warm-up, then cosine decay to MIN_LR_FRACTION × peak."""
    if step < WARMUP_STEPS:
        return peak * (step + 1) / WARMUP_STEPS
    progress = min(1.0, (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return peak * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * cosine)


def new_model(spec: ModelSpec, seed: int) -> Transformer | Mamba2 | Hybrid:
    """A freshly initialised float32 model: N(0, 0.02²) matrices, Mamba-2's decay init, and the
    depthwise conv at PyTorch's default (a 0.02 conv would shrink the SSM inputs 50-fold)."""
    if spec.arch == "transformer":
        return Transformer.random(spec, seed=seed)
    model = (Mamba2 if spec.arch == "ssm" else Hybrid).random(spec, seed=seed)
    torch.manual_seed(seed)
    for mixer in model.mixers:
        mixer.conv1d.reset_parameters()
        torch.nn.init.zeros_(mixer.conv1d.bias)
    return model


def save_weights(state: dict[str, torch.Tensor], spec: ModelSpec, path: Path) -> None:
    """Write a float32 state dict as float16 safetensors; a tied LM head is stored once."""
    tensors = {
        k: v.to(SAVE_DTYPE).contiguous()
        for k, v in state.items()
        if not (spec.tie_embeddings and k == "lm_head.weight")
    }
    write_atomic(path, lambda tmp: save_file(tensors, str(tmp)))


def train_model(
    name: str,
    out: Path,
    tokenizer: ZooTokenizer,
    streams: dict[str, torch.Tensor],
    minutes: float | None,
    seed: int,
    steps: int | None,
) -> dict[str, Any]:
    """Train zoo model `name`, save its best weights under `out`; returns its training report."""
    hp = HYPER[name]
    spec = zoo_specs(out)[name]
    budget_s = math.inf if minutes is None else 60.0 * minutes
    if steps is None and minutes is None:
        steps = hp.steps
    torch.manual_seed(seed)
    master = new_model(spec, seed)
    work = copy.deepcopy(master).to(TRAIN_DTYPE)
    pairs = list(zip(master.parameters(), work.parameters(), strict=True))
    decay = [p for p in master.parameters() if p.ndim >= 2]
    no_decay = [p for p in master.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay}]
    optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=BETAS, weight_decay=0.0)
    teacher = None
    if hp.teacher:
        teacher = load_zoo_model(hp.teacher, TRAIN_DTYPE, out)[0]
    train, heldout, edits = streams["train"], streams["heldout"], streams["edit"]
    n_edit = round(hp.batch * hp.edit_fraction)
    # windows of the edit stream start where an example starts (after an end-of-text token)
    edit_starts = torch.cat([torch.zeros(1, dtype=torch.long),
                             1 + torch.nonzero(edits == tokenizer.eot_id).flatten()])
    edit_starts = edit_starts[edit_starts < edits.numel() - hp.seq_len - 1]
    probe = eval_windows(heldout, hp.seq_len, EVAL_WINDOWS)
    token_bytes = torch.tensor(tokenizer.token_bytes())
    generator = torch.Generator().manual_seed(seed)

    planned = steps or 10**9
    eval_every = max(10, planned // EVALS)
    best_bpb, best_state, best_step, since_best = math.inf, None, 0, 0
    stopped, step, running = "steps", 0, 0.0
    start = time.perf_counter()
    while step < planned:
        lr = lr_at(step, planned, hp.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, train.numel() - hp.seq_len - 1, (hp.batch - n_edit,),
                               generator=generator)
        rows = [train[s : s + hp.seq_len + 1] for s in starts.tolist()]
        if n_edit:
            picks = torch.randint(0, edit_starts.numel(), (n_edit,), generator=generator)
            rows += [edits[s : s + hp.seq_len + 1] for s in edit_starts[picks].tolist()]
        batch = torch.stack(rows)
        logits = sequence_logits(work, batch[:, :-1]).float().flatten(0, 1)
        loss = F.cross_entropy(logits, batch[:, 1:].flatten())
        if teacher is not None:
            with torch.no_grad():
                target = F.log_softmax(sequence_logits(teacher, batch[:, :-1]).float(), -1)
            kl = F.kl_div(
                F.log_softmax(logits, -1),
                target.flatten(0, 1),
                log_target=True,
                reduction="batchmean",
            )
            loss = 0.5 * loss + 0.5 * kl
        loss.backward()
        for m, w in pairs:
            m.grad, w.grad = w.grad.float(), None
        torch.nn.utils.clip_grad_norm_(master.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for m, w in pairs:
                w.copy_(m)
        step += 1
        running = loss.item() if step == 1 else 0.9 * running + 0.1 * loss.item()
        elapsed = time.perf_counter() - start
        if steps is None and step == TIMING_STEPS:
            planned = max(WARMUP_STEPS + 1, int(PLANNED_FRACTION * budget_s * step / elapsed))
            eval_every = max(10, planned // EVALS)
        if step % eval_every == 0 or step == planned or elapsed > budget_s:
            bpb = evaluate(work, probe, token_bytes).bits_per_byte
            if bpb < best_bpb:
                best_bpb, best_step, since_best = bpb, step, 0
                best_state = {k: v.detach().clone() for k, v in master.state_dict().items()}
            else:
                since_best += 1
            print(
                f"{name} step {step}/{planned} lr {lr:.2e} train loss {running:.3f} "
                f"held-out {bpb:.4f} bits/byte  {elapsed:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            if since_best >= PATIENCE:
                stopped = "patience"
                break
            if elapsed > budget_s:
                stopped = "budget"
                break
    wall = time.perf_counter() - start
    save_weights(best_state, spec, weights_path(name, out))

    model = load_zoo_model(name, directory=out)[0]
    windows = eval_windows(heldout, hp.seq_len, FINAL_EVAL_WINDOWS)
    final = evaluate(model, windows, token_bytes)
    report: dict[str, Any] = {
        "params": sum(p.numel() for p in master.parameters()),
        "tokens_seen": step * hp.batch * hp.seq_len,
        "steps": step,
        "planned_steps": planned,
        "best_step": best_step,
        "stopped_by": stopped,
        "wall_time_s": round(wall, 1),
        "heldout_bits_per_byte": round(final.bits_per_byte, 4),
        "heldout_bits_per_token": round(final.bits_per_token, 4),
        "heldout_top1_accuracy": round(final.top1_accuracy, 4),
        "heldout_tokens": final.tokens,
        "lr": hp.lr,
        "batch": hp.batch,
        "seq_len": hp.seq_len,
        "train_dtype": "bfloat16, float32 master weights",
        "distilled_from": hp.teacher,
        "edit_fraction": hp.edit_fraction,
        "seed": seed,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(),
    }
    agreement = {
        target: round(top1_agreement(model, load_zoo_model(target, directory=out)[0], windows), 4)
        for target in hp.agree_with
        if weights_path(target, out).is_file()
    }
    if agreement:
        report["top1_agreement"] = agreement
    return report


def toml_value(value: Any) -> str:
    """`value` (bool, number, string, list or flat dict) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_key(key: str) -> str:
    """A bare TOML key when possible, else a quoted one."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def render_zoo_toml(tables: dict[str, dict[str, Any]]) -> str:
    """The text of `zoo.toml`: each model's spec fields, then its `training` report table."""
    parts = [TOML_HEADER]
    for name, table in tables.items():
        lines = [f"[{json.dumps(name)}]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items() if k != "training"]
        if table.get("training"):
            lines += ["", f"[{json.dumps(name)}.training]"]
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table["training"].items()]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def prepare(out: Path) -> tuple[ZooTokenizer, dict[str, torch.Tensor]]:
    """Make `out` a zoo folder (specs from the shipped zoo.toml, reports dropped, when it has
    none; the shipped tokenizer, or a freshly trained one when it has none) and return the
    tokenizer and the "train", "heldout" and "edit" (code-edit examples of the training
    modules) token streams."""
    if not (out / ZOO_TOML).is_file():
        tables = {
            name: {k: v for k, v in table.items() if k != "training"}
            for name, table in read_zoo_tables(ZOO_DIR).items()
        }
        write_text_atomic(out / ZOO_TOML, render_zoo_toml(tables))
    texts = {part: corpus_texts(part) for part in ("train", "heldout")}
    texts["edit"] = edit_documents(split_modules()[0])
    tokenizer_path = out / TOKENIZER_FILE
    if tokenizer_path.is_file():
        tokenizer = ZooTokenizer.load(tokenizer_path)
    elif (ZOO_DIR / TOKENIZER_FILE).is_file():
        tokenizer = ZooTokenizer.load(ZOO_DIR / TOKENIZER_FILE)
        tokenizer.save(tokenizer_path)
    else:
        tokenizer = train_tokenizer(texts["train"])
        tokenizer.save(tokenizer_path)
    return tokenizer, {part: token_stream(tokenizer, t) for part, t in texts.items()}


def train(
    names: list[str],
    out: Path = ZOO_DIR,
    minutes: float | None = None,
    seed: int = 0,
    steps: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Train the named zoo models in order into `out`; returns their training reports.

    `steps` overrides each model's step count; `minutes` plans it from a wall-clock budget
    instead (and stops there). Each report is written to `out/zoo.toml` as soon as its
    model is saved.
    """
    out = Path(out)
    unknown = sorted(set(names) - set(HYPER))
    if unknown:
        raise InputError(f"unknown zoo model(s) {unknown}; zoo models: {', '.join(ORDER)}")
    tokenizer, streams = prepare(out)
    reports = {}
    for name in names:
        teacher = HYPER[name].teacher
        if teacher and not weights_path(teacher, out).is_file():
            raise InputError(f"{out}: {name} is distilled from {teacher}; train {teacher} first")
        reports[name] = train_model(name, out, tokenizer, streams, minutes, seed, steps)
        tables = read_zoo_tables(out)
        tables[name]["training"] = reports[name]
        write_text_atomic(out / ZOO_TOML, render_zoo_toml(tables))
    return reports
