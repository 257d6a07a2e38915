"""specscope against Hugging Face transformers' own speculative decoding, on the same models.

Run: .venv/bin/python benchmarks/peers.py [--runtime compile] [--n 8] [--max-new 64]
     [--threads N] [--repeats 3] [-o benchmarks/results/peers-cpu.json]

The zoo's tiny-code and tiny-code-draft are exported as local Hugging Face Llama folders
(`export_llama`; logits equal to specscope's within 1e-4) and decoded by transformers as a user
would call it: `generate(max_new_tokens=..., do_sample=False)` plain, with
`prompt_lookup_num_tokens` 4, 8 and 10, and with `assistant_model=<draft>` and its defaults
(up to 20 draft tokens a step, cut short once the draft's confidence falls below a threshold that
starts at 0.4, adapts, and is kept across calls). specscope decodes the same
prompts autoregressively and with a sweep of n-gram and draft-model trees (budgets are tree
sizes, root included; trees shaped by the acceptance stored with the zoo target or by a
calibration pass on other prompts) under --runtime (compile time excluded, reported apart).

Per prompt, every configuration of both engines runs once, one after another (interleaved, so
that both see the same drift in machine load), in one process with `torch.set_num_threads`; the
whole pass over the prompts is repeated --repeats times and each request keeps its fastest run
(load only ever adds time). tokens/s counts the new tokens over the wall time of the whole
request, prefill included. Every speculative output (every repeat) is checked against its own
engine's greedy output; the two engines' greedy outputs are compared too. "Best of a family" is
the configuration with the most tokens/s over the prompt set, for each engine alike. The result
file records the 1-minute load average at the start and the end: on a shared CPU, other work
slows both engines alike but adds noise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from provenance import cpu_name  # benchmarks/provenance.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.executor.drafters import make_drafter
from specscope.executor.generate import calibration
from specscope.executor.loop import decode_autoregressive, decode_speculative
from specscope.executor.methods import Method, resolve_method
from specscope.executor.runtime import Runtime
from specscope.executor.session import Session, load_session
from specscope.executor.targets import Model
from specscope.executor.threads import use_threads
from specscope.executor.zoo_acceptance import stored_acceptance
from specscope.models import get_model
from specscope.models.torch.hf_export import export_llama

TARGET, DRAFT = "tiny-code", "tiny-code-draft"
PROMPT_SETS = ("builtin:code-edit", "builtin:stdlib-code")
LOOKUP = (4, 8, 10)
NGRAM_TREES = tuple((a, b) for a in ("chain", "sequoia") for b in (4, 8, 16))
DRAFT_TREES = (("chain", 3), ("chain", 4), ("sequoia", 4), ("sequoia", 8), ("dyspec", 4),
               ("dyspec", 8), ("specdecpp", 8))
console = Console(width=140)


@dataclass
class Config:
    """One way of decoding: its engine, family (autoregressive, n-gram, draft model), name, the
    function that decodes one prompt (returns its new tokens), and what it measured."""

    engine: str
    family: str
    name: str
    decode: Callable[[list[int]], list[int]]
    seconds: list[float] = field(default_factory=list)
    """Per prompt, the fastest request's wall time."""
    outputs: list[list[int]] = field(default_factory=list)
    """Per prompt, the first run's new tokens."""
    stable: bool = True
    """Whether every repeat gave each prompt the same output."""

    def run(self, index: int, prompt: list[int]) -> None:
        """Decode prompt `index` once: keep its fastest time, check its output repeats."""
        start = time.perf_counter()
        out = self.decode(prompt)
        seconds = time.perf_counter() - start
        if index == len(self.seconds):
            self.seconds.append(seconds)
            self.outputs.append(out)
        else:
            self.seconds[index] = min(self.seconds[index], seconds)
            self.stable &= out == self.outputs[index]

    @property
    def tokens(self) -> int:
        """New tokens over all prompts."""
        return sum(map(len, self.outputs))

    @property
    def tokens_per_s(self) -> float:
        """New tokens per second over the fastest run of each request, prefill included."""
        return self.tokens / sum(self.seconds)


def hf_configs(folder: Path, max_new: int) -> list[Config]:
    """transformers' plain, prompt-lookup and assisted greedy decoding of the exported folders."""
    from transformers import LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(folder / TARGET, local_files_only=True).eval()
    draft = LlamaForCausalLM.from_pretrained(folder / DRAFT, local_files_only=True).eval()

    def decoder(**options) -> Callable[[list[int]], list[int]]:
        def decode(prompt: list[int]) -> list[int]:
            ids = torch.tensor([prompt])
            out = target.generate(ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=max_new, do_sample=False, pad_token_id=0,
                                  **options)
            return out[0, len(prompt):].tolist()
        return decode

    return [Config("hf", "ar", "generate", decoder()),
            *[Config("hf", "ngram", f"prompt lookup {k}", decoder(prompt_lookup_num_tokens=k))
              for k in LOOKUP],
            Config("hf", "draft", "assistant_model", decoder(assistant_model=draft))]


def specscope_configs(target: Model, draft: Model, others: list[list[int]],
                      max_new: int) -> list[Config]:
    """specscope's autoregressive decoding and its n-gram and draft-model trees."""

    def ar(prompt: list[int]) -> list[int]:
        return decode_autoregressive(target, prompt, max_new).output

    def speculative(kind: str, algo: str, budget: int) -> Callable[[list[int]], list[int]]:
        drafter = make_drafter(kind, target.vocab_size, draft)
        calibrate = calibration(target, draft, others, max_new, 0.0, 0, "other prompts")
        method: Method = resolve_method(algo, budget, drafter, calibrate,
                                        stored_acceptance(TARGET, drafter.source))
        return lambda prompt: decode_speculative(target, drafter, method, prompt,
                                                 max_new).output

    return [Config("specscope", "ar", "autoregressive", ar),
            *[Config("specscope", "ngram", f"{a} n={b}", speculative("ngram", a, b))
              for a, b in NGRAM_TREES],
            *[Config("specscope", "draft", f"{a} n={b}", speculative("draft", a, b))
              for a, b in DRAFT_TREES]]


def best(configs: list[Config], engine: str, family: str) -> Config:
    """The configuration of `engine` and `family` with the most tokens/s."""
    return max((c for c in configs if c.engine == engine and c.family == family),
               key=lambda c: c.tokens_per_s)


def measure(prompt_set: str, args: argparse.Namespace, folder: Path, session: Session) -> dict:
    """Every configuration on one prompt set; prints its table and returns its summary (with
    the seconds compiling specscope's steps took for this set)."""
    target, draft = session.target, session.draft
    compiled_before = target.setup_s + draft.setup_s
    tokens = session.prompts(prompt_set)
    prompts, others = tokens[: args.n], tokens[args.n : args.n + 4]
    configs = hf_configs(folder, args.max_new) + specscope_configs(target, draft, others,
                                                                   args.max_new)
    for model in (target, draft):
        model.prepare(max(b for _, b in NGRAM_TREES + DRAFT_TREES))
    for config in configs:  # warm-up: first calls allocate and load
        config.decode(prompts[0][:40])
    for _ in range(args.repeats):
        for i, prompt in enumerate(prompts):
            for config in configs:
                config.run(i, prompt)
    reference = {e: best(configs, e, "ar") for e in ("hf", "specscope")}
    table = Table(title=f"{prompt_set}: {args.n} prompts × {args.max_new} new tokens, greedy, "
                        f"prefill included, {args.threads} thread(s), fastest of {args.repeats} "
                        f"per request, specscope {session.runtime.kind}")
    for col in ("engine", "family", "configuration", "tok/s", "vs own AR", "lossless"):
        table.add_column(col, justify="right" if col in ("tok/s", "vs own AR") else "left")
    rows = []
    for c in configs:
        ar = reference[c.engine]
        lossless = c.stable and ar.stable and c.outputs == ar.outputs
        table.add_row(c.engine, c.family, c.name, f"{c.tokens_per_s:.0f}",
                      f"{c.tokens_per_s / ar.tokens_per_s:.2f}×", "yes" if lossless else "NO")
        rows.append({"engine": c.engine, "family": c.family, "config": c.name,
                     "tokens_per_s": c.tokens_per_s, "tokens": c.tokens,
                     "seconds": sum(c.seconds), "lossless": lossless})
    console.print(table)
    ratios = {
        "ngram_vs_hf": best(configs, "specscope", "ngram").tokens_per_s
        / best(configs, "hf", "ngram").tokens_per_s,
        "draft_vs_hf": best(configs, "specscope", "draft").tokens_per_s
        / best(configs, "hf", "draft").tokens_per_s,
        "draft_vs_own_ar": best(configs, "specscope", "draft").tokens_per_s
        / best(configs, "specscope", "ar").tokens_per_s,
    }
    same = reference["hf"].outputs == reference["specscope"].outputs
    console.print(
        f"best n-gram: specscope {best(configs, 'specscope', 'ngram').name} / hf "
        f"{best(configs, 'hf', 'ngram').name} = {ratios['ngram_vs_hf']:.2f}×; best draft "
        f"model: specscope {best(configs, 'specscope', 'draft').name} / hf assisted = "
        f"{ratios['draft_vs_hf']:.2f}×, / specscope autoregressive = "
        f"{ratios['draft_vs_own_ar']:.2f}×; greedy outputs of the two engines "
        f"{'agree' if same else 'differ'}; specscope compile time "
        f"{target.setup_s + draft.setup_s - compiled_before:.1f} s (excluded)")
    bests = {f"best_{e}_{f}": best(configs, e, f).name
             for e in ("hf", "specscope") for f in ("ngram", "draft")}
    return {"prompt_set": prompt_set, "rows": rows, **ratios, **bests,
            "greedy_outputs_agree": same,
            "setup_s": target.setup_s + draft.setup_s - compiled_before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="compile", choices=("eager", "compile"),
                        help="specscope's runtime on this CPU (compile time excluded)")
    parser.add_argument("--n", type=int, default=8, help="prompts per set")
    parser.add_argument("--max-new", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: specscope's, use_threads)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved passes; each request keeps its fastest")
    parser.add_argument("-o", "--output", default="benchmarks/results/peers-cpu.json")
    args = parser.parse_args()
    threads = use_threads(args.threads, get_model(TARGET), get_model(DRAFT))
    args.threads = threads.count  # both engines run on it; the tables say it
    transformers.utils.logging.disable_progress_bar()
    session = load_session(TARGET, DRAFT, Runtime.resolve("cpu", "float32", args.runtime))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in (TARGET, DRAFT):
            export_llama(name, folder / name)
        sets = [measure(s, args, folder, session) for s in PROMPT_SETS]
    cpu = cpu_name()
    result = {"provenance": {"cpu": cpu, **threads.to_dict(), "torch": torch.__version__,
                             "transformers": transformers.__version__,
                             "date": datetime.date.today().isoformat(),
                             "runtime": args.runtime, "n": args.n, "max_new": args.max_new,
                             "repeats": args.repeats,
                             "load_average_1min": [load_before, os.getloadavg()[0]]},
              "sets": sets}
    write_text_atomic(Path(args.output), json.dumps(result, indent=1) + "\n")
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
