"""What `specscope trace import` costs on a big file: peak resident memory and wall time.

Run: .venv/bin/python benchmarks/imports.py [--mb 200] [--formats vllm-metrics,comments,sglang-log]
[--out FILE]; the table, with the specscope commit the child imported, goes to `--out`
(default results/imports-cpu.txt). Another commit is measured by putting its checkout first on
PYTHONPATH.

Each file is written into a temporary folder and imported by `python -m specscope trace import
FILE --from FORMAT -o OUT` in a child process, whose peak resident set (`ru_maxrss` of
`os.wait4`) and wall time are printed. The files, each about `--mb` MB:

- `vllm-metrics`: one vLLM scrape (the spec-decode counters of `tests/test_interop_import.py`'s
  shape: 1000 drafts, 650/380/190 accepted by position) followed by other metric families
  (histogram buckets with HELP and TYPE lines), as a server exporting many series writes it;
- `comments`: the same scrape followed by comment lines only;
- `sglang-log`: SGLang decode log lines (`accept len` 2.176, 3 running requests) among other
  log lines, imported with `--steps 3 --topk 1`.

The issue's figure for the 200 MB metrics file before streaming: 3.38 GB resident, 42 s;
this script on the commit before it (6498ad1): results/imports-cpu-6498ad1.txt.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import commit, cpu_name  # benchmarks/provenance.py (run from benchmarks/)
from rich.console import Console
from rich.table import Table

LABELS = 'engine="0",model_name="m"'
SCRAPE = "".join(
    [f"# TYPE vllm:spec_decode_{name}_total counter\n"
     f"vllm:spec_decode_{name}_total{{{LABELS}}} {count}.0\n"
     for name, count in (("num_drafts", 1000), ("num_draft_tokens", 3000),
                         ("num_accepted_tokens", 1220))]
    + [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{d}"}} {a}.0\n'
       for d, a in enumerate((650, 380, 190))])
SGLANG = ("[2026-07-01 12:00:00 TP0] Decode batch, #running-req: 3, #token: 512, token usage: "
          "0.01, accept len: 2.1760, accept rate: 0.40, cuda graph: True, gen throughput "
          "(token/s): 812.40, #queue-req: 0\n")
OTHER_LOG = ('[2026-07-01 12:00:00 TP0] INFO:     127.0.0.1:50312 - "POST /generate HTTP/1.1" '
             "200 OK\n")


def write_file(path: Path, kind: str, size: int) -> list[str]:
    """Write a file of `kind` of about `size` bytes; the import's `--from` and options."""
    with path.open("w") as f:
        written = 0
        if kind == "sglang-log":
            block = (OTHER_LOG * 3 + SGLANG) * 200
            while written < size:
                written += f.write(block)
            return ["--from", "sglang-log", "--steps", "3", "--topk", "1"]
        written += f.write(SCRAPE)
        family = 0
        while written < size:
            if kind == "comments":
                block = "".join(f"# comment line {family}-{i}: nothing to read here\n"
                                for i in range(1000))
            else:
                name = f"vllm:other_latency_seconds_{family}"
                block = (f"# HELP {name} Some other histogram.\n# TYPE {name} histogram\n"
                         + "".join(f'{name}_bucket{{engine="0",le="{i * 0.01:.2f}",'
                                   f'model_name="m"}} {i * 3}.0\n' for i in range(1000)))
            written += f.write(block)
            family += 1
    return ["--from", "vllm-metrics"]


def measure(args: list[str]) -> tuple[int, float, float, str]:
    """Exit status, wall seconds, peak RSS (MB) and last stderr line of `specscope ARGS`."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen([sys.executable, "-m", "specscope", *args],
                                 stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss / 1024, (
        lines[-1] if lines else "")


def provenance(args: argparse.Namespace) -> str:
    """Where and what was measured: the commit of the specscope the child imports, the CPU,
    Python, the date and the command."""
    where = subprocess.run([sys.executable, "-c", "import specscope; print(specscope.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return (f"# benchmarks/imports.py: specscope {commit(repo=Path(where).parent)}, "
            f"{cpu_name()}, "
            f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
            f"{time.strftime('%Y-%m-%d')}\n"
            f"# command: python benchmarks/imports.py --mb {args.mb:g} --formats {args.formats}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--formats", default="vllm-metrics,comments,sglang-log")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "imports-cpu.txt")
    args = parser.parse_args()
    table = Table(title=f"trace import of {args.mb:g} MB files ({os.cpu_count()} cores)")
    for col in ("file", "MB", "exit", "wall s", "peak RSS MB", "stderr (last line)"):
        table.add_column(col, justify="right" if col not in ("file", "stderr (last line)")
                         else "left")
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.formats.split(","):
            path = Path(folder) / f"{kind}.txt"
            options = write_file(path, kind, int(args.mb * 1e6))
            code, wall, rss, err = measure(["trace", "import", str(path), *options, "-o",
                                            str(Path(folder) / f"{kind}.json")])
            table.add_row(kind, f"{path.stat().st_size / 1e6:.0f}", str(code), f"{wall:.1f}",
                          f"{rss:,.0f}", err[:70])
            path.unlink()
    console = Console(width=160, record=True)
    console.print(table)
    header = provenance(args)
    args.out.write_text(header + console.export_text())
    print(header, end="")


if __name__ == "__main__":
    main()
