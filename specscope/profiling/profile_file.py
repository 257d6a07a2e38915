"""A `profile-hw` run's measurements and the profile TOML written from them: the device's
peaks, each runtime's fitted terms with the fit's error (batch 1 and batched), the decode
loop's host costs, the measured tables and the machine's provenance."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from specscope.hw_profiles.loop import SERVER_TERMS, LoopCosts
from specscope.hw_profiles.profile import HardwareProfile
from specscope.hw_profiles.runtime import runtime_toml
from specscope.profiling.measure import SAMPLED_TEMPERATURE, Point
from specscope.profiling.runtime_fit import HOLD_OUT_EVERY, Fit, groups

PRIORS = {"cpu": "cpu-2core", "cuda": "h100"}
"""Shipped profile whose runtime sections start the fit on each device kind."""


@dataclass
class Measurements:
    """Everything one `profile-hw` run measured."""

    device: str
    threads: int
    tflops: float
    copy_gbps: float
    memory_gb: float
    points: list[Point] = field(default_factory=list)
    loop: LoopCosts | None = None
    """The decode loop's host costs (`measure_loop`), where it could run."""
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, str] = field(default_factory=dict)
    threads_reason: str = ""
    """Why `threads` (`Threads.reason`)."""



def profile_toml(hw: HardwareProfile, m: Measurements, fits: dict[str, Fit], command: str,
                 wall_s: float) -> str:
    """The profile file: header comment with provenance and fit quality, the shipped profiles'
    sections, `[runtime.X]` per fit, `[drafters]`, `[speculation]`, `[fit.X]`, `[provenance]`
    and the measured tables as `[[measured]]` (with their runtime)."""
    p, cpu = m.provenance, m.device == "cpu"
    lines = [
        f"# {hw.name}: measured by `{command}` on {p['date']} ({wall_s:.0f} s).",
        f"# Device: {p['device']}; {os.cpu_count()} cores, {m.threads} torch thread(s), "
        f"torch {p['torch']}{', driver ' + p['driver'] if p['driver'] else ''}.",
        "# Steps are the executor's own (CachedModel.prefill / verify, binary trees, batch 1: the "
        "single-sequence",
        "# executor), catalogue models with random weights, warm-up per shape, median of "
        "repeats.",
        "# Runtime sections: fitted with scipy least squares on log(predicted / measured) through "
        "CostModel;",
        f"# every {HOLD_OUT_EVERY}th point of each t(n) table held out (rotating over n). Held-out "
        "relative error per runtime:",
        *[f"#   {f.runtime}: median {f.heldout_median_rel_err:.1%}, max "
          f"{f.heldout_max_rel_err:.1%} over {f.held_out} points ({f.points} fitted, "
          f"median {f.fit_median_rel_err:.1%})" for f in fits.values()],
        *_batched_header(fits),
        "# Prefill (context 0) runs eager under every runtime (the executor's wrappers prefill "
        "eagerly), so",
        "# prefill rows fit `eager`; other runtimes take its prefill_* fields. The dense-mask "
        "attention the",
        "# executor does not run is set equal to the split one (attn_dense_memory_eff).",
        "# The [[measured]] tables are the fit's data (priced = false): steps are priced from "
        "the fit, which",
        "# pools every point, and the tables re-time this machine (validate's machine drift).",
    ]
    if cpu:
        lines += [
            "# On a CPU the same thread issues and computes: step_us and layer_us stay 0 and the "
            "host terms carry",
            "# every fixed cost. bf16_tflops is the fp32 matrix-product rate the float32 models "
            "run at; the cost",
            "# model counts 16-bit bytes, so the memory efficiencies are per 16-bit byte "
            "(float32 moves twice",
            "# as many).",
        ]
    lines.append(f"# Not measured: int8 and fp8 rates (0: not priced), interconnect and "
                 f"dequantisation ({PRIORS[m.device]}'s priors), each runtime's fields the fit "
                 "did not vary;")
    lines.append("# [assumed] names each such value and where it comes from.")
    lines += [f"# {note}" for note in m.notes]
    lines += [
        "", f'name = "{hw.name}"', f'kind = "{hw.kind}"',
        f'default_runtime = "{hw.default_runtime}"', f"description = {json.dumps(hw.description)}",
        f"sources = [{', '.join(json.dumps(s) for s in hw.sources)}]", "",
        "[compute]",
        f"bf16_tflops = {m.tflops:.6g}    # measured: {'fp32' if cpu else 'bf16'} matrix product",
        f"int8_tops = {hw.peak_flops['int8'] / 1e12:.6g}",
        f"fp8_tflops = {hw.peak_flops['fp8'] / 1e12:.6g}", "",
        "[memory]",
        f"capacity_gb = {m.memory_gb:.4g}",
        f"bandwidth_gbs = {m.copy_gbps:.6g}    # measured: device copy, read + write bytes", "",
        "[interconnect]",
        f"link_gbs = {hw.link_bandwidth / 1e9:.6g}",
        f"max_tp = {hw.max_tp}",
        f"allreduce_latency_us = {hw.allreduce_latency_s * 1e6:.6g}",
        f"shard_lm_head = {str(hw.shard_lm_head).lower()}", "",
        "[dequant]",
        f"int8_ps_per_weight = {hw.dequant_s_per_weight[8] * 1e12:.6g}",
        f"int4_ps_per_weight = {hw.dequant_s_per_weight[4] * 1e12:.6g}",
        f"tile_tokens = {hw.dequant_tile}", "",
        "[assumed]    # each value stated above or below but not measured here, and its origin",
        *[f"{json.dumps(key)} = {json.dumps(text)}" for key, text in hw.assumed.items()
          if key.split(".")[0] != "runtime" or key.split(".")[1] in fits], "",
    ]
    date = p["date"]
    for name in fits:
        lines.append(runtime_toml(dataclasses.replace(
            hw.runtimes[name], origin=f"fitted by profile-hw on {date}")))
    if m.loop is not None:
        loop = m.loop
        lines += ["[drafters]    # host µs per drafted level (one propose call), in the loop"]
        lines += [f"{k}_us = {v * 1e6:.4g}" for k, v in loop.drafter.items()]
        lines += [
            "", "[speculation]    # µs, measured in the decode loop",
            f"step_us = {loop.step * 1e6:.4g}    # bookkeeping per step",
            f"level_us = {loop.level * 1e6:.4g}    # per draft-model level beyond its forward",
            f"verify_us = {loop.verify * 1e6:.4g}    # per verification beyond the target's "
            "forward",
            f"sampled_verify_us = {loop.sampled_verify * 1e6:.4g}    # the same at "
            f"temperature {SAMPLED_TEMPERATURE}",
            f"cold_level_us = {loop.draft_cold * 1e6:.4g}    # a draft forward in the loop "
            "over the same forward alone",
            f"cold_verify_us = {loop.verify_cold * 1e6:.4g}    # the target's forward in the "
            "loop over the same forward alone",
            f"node_us = {loop.node * 1e6:.4g}    # per draft-model level, per further node it "
            "proposes for",
            f"dyspec_node_us = {loop.dyspec_node * 1e6:.4g}    # the same in DySpec's live "
            "builder",
            f"stop_rule_us = {loop.stop_rule * 1e6:.4g}    # SpecDec++'s stop check per "
            "drafted token",
        ]
        if any(getattr(loop, term) for term in SERVER_TERMS):
            lines += [
                f"serve_step_us = {loop.serve_step * 1e6:.4g}    # the batching server's work "
                "per step",
                f"serve_row_us = {loop.serve_row * 1e6:.4g}    # the same per sequence that "
                "does not speculate",
                f"choose_step_us = {loop.choose_step * 1e6:.4g}    # SmartSpec's choice of "
                "length per step",
                f"choose_row_us = {loop.choose_row * 1e6:.4g}    # the same per running "
                "sequence",
                f"shared_row_us = {loop.shared_row * 1e6:.4g}    # per sequence and draft "
                "level, sharing one batched draft forward",
                *([] if loop.spec_row is None else [
                    f"spec_row_us = {loop.spec_row * 1e6:.4g}    # per sequence that "
                    "speculates, in place of step_us"]),
                f"pads_context = {str(loop.pads_context).lower()}    # its batched pass reads "
                "each row up to the longest row's context",
                f"level_per_row = {str(loop.level_per_row).lower()}    # a draft level's host "
                "work once per sequence",
            ]
        lines.append("")
    lines += hw.wake.toml()
    for fit in fits.values():
        lines += [f"[fit.{fit.runtime}]", f"points = {fit.points}", f"held_out = {fit.held_out}",
                  f"heldout_median_rel_err = {fit.heldout_median_rel_err:.4f}",
                  f"heldout_max_rel_err = {fit.heldout_max_rel_err:.4f}",
                  f"fit_median_rel_err = {fit.fit_median_rel_err:.4f}",
                  f"fitted = [{', '.join(json.dumps(f) for f in fit.fitted)}]"]
        if fit.batched is not None:
            b = fit.batched
            lines += [f"batched_points = {b.points}", f"batched_held_out = {b.held_out}",
                      f"batched_heldout_median_rel_err = {b.heldout_median_rel_err:.4f}",
                      f"batched_heldout_max_rel_err = {b.heldout_max_rel_err:.4f}",
                      f"batched_fit_median_rel_err = {b.fit_median_rel_err:.4f}"]
        lines.append("")
    lines += ["[provenance]", f"device = {json.dumps(p['device'])}", f"cores = {os.cpu_count()}",
              f"threads = {m.threads}", f"threads_reason = {json.dumps(m.threads_reason)}",
              f"torch = {json.dumps(p['torch'])}",
              f"driver = {json.dumps(p['driver'])}", f"date = {json.dumps(date)}",
              f"command = {json.dumps(command)}", f"wall_s = {wall_s:.1f}", ""]
    for (model, runtime, batch, context), rows in groups(
            m.points, ("model", "runtime", "batch", "context")).items():
        lines += ["[[measured]]", f'model = "{model}"', f'runtime = "{runtime}"',
                  f"batch = {batch}",
                  f"context = {context}",
                  f"new_tokens = [{', '.join(str(p.new_tokens) for p in rows)}]",
                  f"time_ms = [{', '.join(f'{p.time_s * 1e3:.4g}' for p in rows)}]",
                  f'source = "profile-hw {date}"', "priced = false", ""]
    return "\n".join(lines)


def _batched_header(fits: dict[str, Fit]) -> list[str]:
    """The header's lines on the batched steps' fit, where any were measured."""
    batched = [f for f in fits.values() if f.batched is not None]
    if not batched:
        return []
    return [
        "# Batched steps (B sequences' trees in one forward of the continuous-batching "
        "executor's target,",
        "# B × n after a context; the draft model's few nodes per row are a batched draft "
        "level) are fitted",
        "# second: only host_seq_us and host_layer_seq_us (each further sequence's host work), "
        "every other",
        "# field held. Held-out relative error of the batched points:",
        *[f"#   {f.runtime}: median {f.batched.heldout_median_rel_err:.1%}, max "
          f"{f.batched.heldout_max_rel_err:.1%} over {f.batched.held_out} points "
          f"({f.batched.points} fitted, median {f.batched.fit_median_rel_err:.1%})"
          for f in batched],
        *(["# Runtimes whose batched steps were not measured take eager's per-sequence "
           "terms."] if len(batched) < len(fits) else []),
    ]
