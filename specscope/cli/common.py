"""What every command shares: option types, comma-list parsing, JSON output, progress, console."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from specscope.atomic import write_text_atomic
from specscope.cli.checks import Choices, DrafterOrModel, Needs, Output, Range
from specscope.errors import InputError
from specscope.json_out import strict_json
from specscope.names import (
    DEFAULT_BUDGET,
    DEFAULT_DRAFT_MODEL,
    DRAFT_MODEL_DRAFTERS,
    PROMPT_SET_SIZES,
    SERVED_MAX_BATCH,
)

console = Console()


Hw = Annotated[str, typer.Option("--hw", help="Hardware profile (a100, h100, h200, cpu-2core, "
                                              "...).")]
PricedRuntime = Annotated[str | None, typer.Option(
    "--runtime", help="Runtime to price (default: the profile's own)."),
    Choices("specscope.names:RUNTIMES")]
Stages = Annotated[int, typer.Option(
    min=1, help="Devices the target's layers are split over in sequence (pipeline placement, "
                "as device_map does): each forward runs them in turn and hands the hidden "
                "states between them.")]
ExportMethod = Annotated[str | None, typer.Option(
    help="The engine's method (default: the source's: a draft model's, or n-gram prompt "
         "lookup), e.g. eagle3 (vllm), EAGLE3 (sglang), Eagle3 (tensorrt-llm).")]
EngineVersion = Annotated[str | None, typer.Option(
    "--engine-version", help="The engine's release to target (vLLM; default: the current, which "
                             "verifies chains only: 0.20.2 or earlier takes trees; before "
                             "0.24.0 a --schedule is written as its best constant).")]
EngineName = Annotated[str | None, typer.Option(
    "--engine", help="Software stack to price (hw_profiles/data/engines: runtimes, tree "
                     "attention, the speculative loop's host work, the baseline's stack); "
                     "default: specscope's own loop as profiled on the hardware."),
    Choices("specscope.hw_profiles.engine:ENGINE_NAMES", files=".toml")]
Offload = Annotated[float, typer.Option(
    "--offload", help="Fraction of the target's weights kept in host memory and streamed over "
                      "the profile's host link every forward (docs/hardware.md#weight-"
                      "offloading)."), Range(0, 1)]
ExpertParallel = Annotated[int, typer.Option(
    "--ep", min=1, help="Expert-parallel degree of an MoE target: its experts spread over groups "
                        "of the --tp devices (--ep = --tp: vLLM's --enable-expert-parallel), "
                        "tokens dispatched and combined by all-to-alls on the profile's link.")]
Precision = Annotated[str, typer.Option(
    "--precision", help="Number format of the target's linear layers: bf16, fp8 (128-blocks "
                        "scaled, on the FP8 tensor cores) or nvfp4 (16-blocks, Blackwell's FP4 "
                        "peak); attention, norms and the LM head stay 16-bit."),
    Choices("specscope.models.precision:PRECISIONS")]
ExpertPrecision = Annotated[str | None, typer.Option(
    "--expert-precision", help="Number format of an MoE target's routed experts alone "
                               "(default: --precision), e.g. nvfp4 experts beside fp8 layers."),
    Choices("specscope.models.precision:PRECISIONS")]
RoutingSkew = Annotated[float | None, typer.Option(
    "--routing-skew", min=0.0, help="An MoE router's measured Zipf skew of expert popularity "
                                    "(0: every expert alike; default: the model's, 0 unless "
                                    "measured): fewer distinct experts read per step.")]
RoutingRowExponent = Annotated[float | None, typer.Option(
    "--routing-row-exponent",
    help="How alike a sequence's own tokens route: its n tokens in a step count as n^A "
         "independent draws (1: independent; default: the model's, 1 unless measured).")]
KvBits = Annotated[int, typer.Option(
    "--kv-bits", help="Bits per KV-cache element: 16, or 8 (an FP8 KV cache: half the cache "
                      "and its reads)."), Choices("specscope.models.precision:KV_BITS")]
TensorParallel = Annotated[int, typer.Option(min=1, help="Tensor-parallel degree of the "
                                                         "target.")]
TreeAttention = Annotated[str | None, typer.Option(
    "--tree-attention", help="split: prefix read once, tree block masked; dense: one "
                             "additive mask over prefix and tree; masked: one flash kernel "
                             "under a bit-packed mask over both (FlashInfer's). Default: the "
                             "--engine's, else split."),
    Choices("specscope.hw_profiles.cost:TREE_ATTENTION")]
Source = Annotated[str | None, typer.Option(
    help="Trace source whose acceptance is used, or its kind alone (rasd) when the trace holds "
         "one (default: the drafter's, else the trace's first draft model).")]
PricedDrafter = Annotated[str | None, typer.Option(
    help="Drafter priced: a catalogue draft model, mtp (the target's own multi-token-"
         "prediction layer), ngram, suffix, recycle, or none (default: "
         "the source's draft model).")]
WeightBits = Annotated[int | None, typer.Option(help="Target weight bits (default: the "
                                                     "model's)."),
                       Choices("specscope.models.ops:WEIGHT_BITS")]
# The deployment option group: every command that prices a deployment (cost, optimize-tree,
# simulate) takes these with these names and defaults and builds one `Deployment` from them
# (`hw_profiles.deployment`); docs/glossary.md says what each means.
PricedTarget = Annotated[str | None, typer.Option(
    "--target", help="Target model from the catalogue (default: the trace's when it names one; "
                     "required otherwise: nothing is priced as a model it was not named).")]
DraftRuntime = Annotated[str | None, typer.Option(
    "--draft-runtime", help="The draft model's runtime (default: the --engine's, else the "
                            "target's)."), Choices("specscope.names:RUNTIMES")]
DraftTp = Annotated[int | None, typer.Option(
    "--draft-tp", min=1, help="Devices the draft model is sharded over (default: the "
                              "--engine's, the target's --tp under vLLM, SGLang and gpt-fast; "
                              "else 1).")]
DraftWindow = Annotated[int | None, typer.Option(
    "--draft-window", min=1, help="Tokens of context the draft keeps and reads (capped-KV "
                                  "self-speculation, a draft with a bounded cache; default: "
                                  "the whole context).")]
DraftVocab = Annotated[int | None, typer.Option(
    "--draft-vocab", min=1, help="The draft's vocabulary (an EAGLE-3 head's reduced one; "
                                 "default: the draft model's own).")]
Context = Annotated[int | None, typer.Option(
    "--context", min=0, help="Tokens already cached per sequence (default: the trace's mean, "
                             "else 512; cost: 0 prices a prompt of --new-tokens tokens).")]
StaticBatch = Annotated[int, typer.Option(
    "--batch", min=1, help="Sequences decoded together, a static batch: every tree and the "
                           "plain baseline are priced at it.")]
ServerMaxBatch = Annotated[int | None, typer.Option(
    "--max-batch", min=1, help="A server's limit of sequences per step, on both sides of the "
                               "plain comparison (default: the --engine scheduler's, vLLM's "
                               "256, SGLang's 2048 and 48 while speculating; else 32).")]
PromptLen = Annotated[str | None, typer.Option(
    "--prompt-len", help="Prompt tokens of the workload: N, uniform:A:B, "
                         "lognormal:MEDIAN:SIGMA or trace (default: the trace's, else 512).")]
WorkloadOutputLen = Annotated[str | None, typer.Option(
    "--output-len", help="Output tokens of the workload: N, uniform:A:B, "
                         "lognormal:MEDIAN:SIGMA or trace (default: the trace's, else 256).")]


Device = Annotated[str, typer.Option(help="Where to run (auto: cuda when available)."),
                   Choices("specscope.names:DEVICES")]
Dtype = Annotated[str, typer.Option(help="Weights, caches and activations."),
                  Choices("specscope.names:DTYPE_NAMES")]
StepRuntime = Annotated[str | None, typer.Option(
    "--runtime", help="How steps run: eager, CUDA graphs or torch.compile (default: graph on "
                      "cuda, eager on cpu)."),
    Choices("specscope.names:RUNTIMES")]
Seed = Annotated[int, typer.Option(min=0, help="Random seed.")]
CpuThreads = Annotated[int | None, typer.Option(
    "--threads", min=1, help="torch CPU threads (default: 1 on cuda and for models under 100M "
                       "parameters, else the fastest on a short probe; recorded with why).")]
SystemName = Annotated[str | None, typer.Option(
    "--system", help="A seed system whose cost models serve (head, hierspec, longspec, ...)."),
    Choices("specscope.systems.registry:SYSTEM_NAMES")]
SystemOptions = Annotated[str | None, typer.Option(
    "--system-options", help="The system's own keys, KEY=VALUE,... (window=512).")]
Images = Annotated[int, typer.Option(min=0, help="Images per request (vision-language systems: "
                                                 "their tokens join every prompt).")]
PROMPT_SOURCES = (f"a built-in set ({', '.join(f'builtin:{name}' for name in PROMPT_SET_SIZES)})"
                  ' or a .jsonl file, one {"prompt": "..."} object per line (UTF-8, blank lines '
                  "skipped)")
"""What `--prompts` takes (`models/zoo/prompts.py:load_prompts`), for its help."""
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
PolicyDepth = Annotated[int, typer.Option(min=1, help="Depth cap of the dynamic policies.")]
MaxBatch = Annotated[int | None, typer.Option(
    min=1, help=f"Sequences per step, the server's limit (default {SERVED_MAX_BATCH}, the "
                "executor's).")]
TokenBudget = Annotated[int, typer.Option(min=1, help="Tokens per step (trees and prompts).")]
ChunkedPrefill = Annotated[int | None, typer.Option(min=1, help="Prefill prompts in chunks of "
                                                                "this many tokens.")]
Arrivals = Annotated[str, typer.Option(help="Arrival process."),
                     Choices("specscope.simulator.workload:ARRIVALS")]
ArrivalCv = Annotated[float, typer.Option("--cv", help="Gamma arrivals: coefficient of "
                                                       "variation."),
                      Range(0, low_closed=False)]
ArrivalFile = Annotated[Path | None, typer.Option(help="Arrival times, one number of seconds "
                                                       "per line.")]
ScheduleFile = Annotated[Path | None, typer.Option(
    "--schedule", help="--policy schedule's table: optimize-tree --schedule -o output (a tree, "
                       "or none, per running batch size and, where it states them, context).")]
SloTpot = Annotated[float | None, typer.Option(help="TPOT SLO of goodput (ms)."),
                    Range(0, low_closed=False)]
SloTtft = Annotated[float | None, typer.Option(help="TTFT SLO of goodput (ms)."),
                    Range(0, low_closed=False)]
GpuHourUsd = Annotated[float | None, typer.Option(
    "--gpu-hour-usd", help="Price of one GPU-hour: the cost per million output tokens of the "
                           "GPUs the deployment holds (tp × stages × replicas)."),
    Range(0, low_closed=False)]
MetricsOutput = Annotated[Path | None, typer.Option(
    "-o", "--output", help="Per-request metrics parquet (summary in its metadata); the time "
                           "series and event log go beside it."),
    Output(inputs=("trace", "tree", "arrival_file"))]
Force = Annotated[bool, typer.Option("--force", help="Replace output files that exist.")]


def _csv_ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _csv_floats(text: str, option: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated numbers, got {text!r}") from None


def _acceptance_inputs(trace: Path | None, acceptance: str | None
                       ) -> tuple[Path | None, list[float] | None]:
    """`--trace` and `--acceptance` as every command reads them: `--acceptance` takes
    P1,P2,... or an acceptance JSON (`trace import`'s output), and so does `--trace`."""
    from specscope.interop.counters import read_acceptance

    if trace is not None and trace.suffix == ".json":
        if acceptance is not None:
            raise InputError("give one of --trace and --acceptance")
        return None, read_acceptance(trace)
    if acceptance is None:
        return trace, None
    if acceptance.endswith(".json"):
        return trace, read_acceptance(Path(acceptance))
    return trace, _csv_floats(acceptance, "--acceptance")


def _emit(payload: dict | list, as_json: bool, output: Path | None = None,
          summary: str = "") -> bool:
    """Put out a command's report document, the one rule of every command with `--json` and
    `-o`: `-o FILE` writes the document there and prints one line saying what was written
    where (`summary`), never the document; `--json` without `-o` prints it on stdout. True
    when done, False when the caller prints its tables (neither option). The document is
    strict JSON: a non-finite number (NaN, ±inf) is an `InputError` naming its field, before
    anything is written."""
    text = strict_json(payload)
    if output is not None:
        write_text_atomic(output, text + "\n")
        _wrote(output, summary, False)
    elif as_json:
        sys.stdout.write(text + "\n")
    return output is not None or as_json


def _wrote(path: Path, summary: str, as_json: bool) -> None:
    """The one line saying that `path` was written and what it holds; on stderr under
    `--json`, which keeps stdout one JSON document (commands whose `-o` file is not their
    report: simulate, validate)."""
    line = f"wrote {path}" + (f": {summary}" if summary else "")
    if as_json:
        print(line, file=sys.stderr)
    else:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def _progress(label: str) -> Progress:
    """A rich progress bar on stderr; the library reports (done, total) to it."""

    return Progress(f"[bold]{label}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())  # keep logs and error output one line


def _check_metrics_output(output: Path | None, force: bool) -> None:
    """Before a run: the files a metrics `-o` writes beside its table (`check_output`)."""
    from specscope.outputs import check_output
    from specscope.simulator.metrics import beside_paths

    for path in [] if output is None else beside_paths(output):
        check_output(path, "-o", force=force)


def _report_serving(result: Any, as_json: bool, output: Path | None) -> None:
    """A serving run's (simulated or real) summary, as a table or JSON, and its metrics files
    with `-o`: the per-request table, the time series and the event log."""
    from specscope.simulator.metrics import write_metrics
    from specscope.tables import simulate_table

    if as_json:
        _emit(result.summary, True)
    else:
        console.print(simulate_table(result.summary))
    if output is not None:
        written = write_metrics(output, result.requests, result.summary, result.timeseries,
                                result.events)
        _wrote(output, f"{result.requests.height:,} requests, the summary in its metadata; "
                       f"{', '.join(p.name for p in written[1:])} beside it", as_json)


# The options of the commands that run real models, one name and one help per concept
# (docs/glossary.md; tests/test_option_vocabulary.py keeps it so).
Target = Annotated[str, typer.Option("--target", help="Target model: a zoo model (tiny-code, "
                                                      "...) or a Hugging Face folder.")]
ZooTarget = Annotated[str, typer.Option("--target", help="Target model: a zoo model "
                                                         "(tiny-code, ...).")]
DRAFTER_HELP = ("Who drafts: a drafter kind, or a draft model (a zoo model or a Hugging Face "
                "folder), which is kind draft running that model")
"""The help of every `--drafter` that takes a kind or a model (`DrafterOrModel`)."""


def drafter_option(kinds: str, note: str = "", many: bool = False) -> Any:
    """A `--drafter` option type taking the drafter kinds of `kinds` ("module:NAME") or a draft
    model (`DrafterOrModel`); `note` ends its help (a sentence, or empty)."""
    return Annotated[str, typer.Option("--drafter", help=f"{DRAFTER_HELP}.{note and ' ' + note}"),
                     DrafterOrModel(kinds, many=many)]


DraftModel = Annotated[str | None, typer.Option(
    "--draft-model", help=f"The weights a model-based drafter ({', '.join(DRAFT_MODEL_DRAFTERS)}) "
                          f"loads: a zoo model or a Hugging Face folder (default: "
                          f"{DEFAULT_DRAFT_MODEL}); --drafter MODEL says the same for draft."),
    Needs(("drafter",), DRAFT_MODEL_DRAFTERS)]
OutputLen = Annotated[int, typer.Option("--output-len", min=1, metavar="N",
                                        help="Output tokens per request.")]
Budget = Annotated[int | None, typer.Option(
    "--budget", min=1, help=f"Tree size n per step, root included: a static tree's, or the most "
                            f"a dynamic policy grows (default {DEFAULT_BUDGET}).")]
