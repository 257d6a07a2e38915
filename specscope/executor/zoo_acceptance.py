"""Acceptance statistics stored with the zoo: measured once after training, read by `generate`.

After `specscope zoo train`, every zoo target gets the positional acceptance vector of the zoo's
draft model (`draft:tiny-code-draft`) in its report, under `acceptance`: measured by collecting a
greedy trace over windows of the held-out modules (`PROMPTS` prompts of `PROMPT_TOKENS` tokens,
`NEW_TOKENS` generated each) and fitting `AcceptanceModel`. Static tree methods of `generate`
shape their tree from it instead of running a calibration pass.

Only the draft model's acceptance is stored: it is a property of the (target, draft) pair. How
often model-free drafters (n-gram, suffix, recycling) are accepted depends on the workload (a
completion accepts few copies, an edit many), so those are calibrated on other prompts of the
workload being decoded.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import DraftModelDrafter
from specscope.executor.targets import wrap
from specscope.models.zoo import (
    ZOO_DIR,
    ZOO_TOML,
    load_zoo_model,
    load_zoo_tokenizer,
    read_zoo_tables,
    weights_path,
)
from specscope.models.zoo.data import corpus_texts
from specscope.models.zoo.train import eval_windows, render_zoo_toml, token_stream
from specscope.names import DEFAULT_DRAFT_MODEL
from specscope.trace import AcceptanceModel

PROMPTS = 24
PROMPT_TOKENS = 128
NEW_TOKENS = 48


def measure_acceptance(target: str, draft: str = DEFAULT_DRAFT_MODEL,
                       directory: Path = ZOO_DIR) -> list[float]:
    """Positional acceptance p_1..p_K of zoo model `draft` drafting for zoo model `target`,
    greedy, on windows of the held-out modules."""
    module = load_zoo_model(target, directory=directory)[0]
    drafter = DraftModelDrafter(wrap(load_zoo_model(draft, directory=directory)[0], draft))
    trace = collect_tokens(wrap(module, target), [drafter], heldout_prompts(directory),
                           NEW_TOKENS)
    p = AcceptanceModel.from_trace(trace, drafter.source).p
    return [round(float(x), 4) for x in np.ravel(p)]


@cache
def heldout_prompts(directory: Path = ZOO_DIR) -> tuple[tuple[int, ...], ...]:
    """The measurement's prompts: `PROMPTS` windows of `PROMPT_TOKENS` tokens spread over the
    held-out modules, tokenised once per zoo folder (every target shares the tokenizer)."""
    stream = token_stream(load_zoo_tokenizer(directory), corpus_texts("heldout"))
    return tuple(map(tuple, eval_windows(stream, PROMPT_TOKENS - 1, PROMPTS).tolist()))


def store_acceptance(directory: Path = ZOO_DIR, draft: str = DEFAULT_DRAFT_MODEL) -> dict:
    """Measure and write the draft's acceptance into every trained zoo target's report; returns
    {target: {source: vector}}. Nothing is written while the draft has no weights."""
    directory = Path(directory)
    tables = read_zoo_tables(directory)
    if not weights_path(draft, directory).is_file():
        return {}
    source = f"draft:{draft}"
    stored = {}
    for name, table in tables.items():
        if name == draft or not weights_path(name, directory).is_file():
            continue
        vector = measure_acceptance(name, draft, directory)
        table.setdefault("training", {}).setdefault("acceptance", {})[source] = vector
        stored[name] = {source: vector}
    write_text_atomic(directory / ZOO_TOML, render_zoo_toml(tables))
    return stored


def stored_acceptance(model: str, source: str, directory: Path = ZOO_DIR) -> np.ndarray | None:
    """The positional acceptance vector of `source` stored in zoo model `model`'s report, if any
    (None for models outside the zoo)."""
    try:
        table = read_zoo_tables(directory).get(model, {})
    except InputError:
        return None
    vector = table.get("training", {}).get("acceptance", {}).get(source)
    return None if vector is None else np.asarray(vector, dtype=np.float64)
