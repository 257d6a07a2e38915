"""Issue 40, items 6 and 7: imports and serving runs that summed silently, crashed, blew memory
or waited forever. Each case ends in one stderr line and exit status 2 (or one warning line and
the right result), its input untouched and nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest
from conftest import Cli
from test_guards import refused

SCRAPE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3000.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1220.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 650.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 380.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 190.0
"""
P0 = 1220 / (1000 + 650 + 380)
DECODE = ("[2026-07-01 12:00:00 TP0] Decode batch, #running-req: {r}, #token: 512, token "
          "usage: 0.01, accept len: {m}, accept rate: 0.40, cuda graph: True, gen throughput "
          "(token/s): 812.40, #queue-req: 0\n")
SGLANG = ("--from", "sglang-log", "--steps", "3", "--topk", "1")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_refused(cli: Cli, tmp_path: Path, content: str | bytes, args: tuple[str, ...],
                   *words: str) -> str:
    """`trace import` of `content` refused in one line naming `words`; input untouched,
    nothing written."""
    path = tmp_path / "input.txt"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    before = digest(path)
    out = tmp_path / "acc.json"
    line = refused(cli("trace", "import", path, *args, "-o", out), str(path), *words)
    assert digest(path) == before and not out.exists()
    return line


# item 7: duplicate series, never summed

@pytest.mark.parametrize(("content", "words"), [
    (SCRAPE + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1700.0\n',
     ('vllm:spec_decode_num_drafts{engine="0",model_name="m"}', "line 9", "line 3",
      "1700 against 1000")),
    (SCRAPE + SCRAPE.replace("} 1000.0", "} 2000.0").replace("} 650.0", "} 1300.0"),
     ("num_drafts", "repeats line 3", "two scrapes")),
    (SCRAPE + SCRAPE.replace("} 190.0", "} 191.0"),
     ('num_accepted_tokens_per_pos{engine="0",model_name="m",position="2"}',)),
], ids=["repeated-num-drafts", "two-scrapes", "one-position-differs"])
def test_conflicting_duplicate_series_are_refused(cli: Cli, tmp_path: Path, content: str,
                                                  words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, content, ("--from", "vllm-metrics"), *words)


def test_a_scrape_pasted_twice_is_counted_once_with_one_warning(cli: Cli,
                                                                tmp_path: Path) -> None:
    once, twice = tmp_path / "once.txt", tmp_path / "twice.txt"
    once.write_text(SCRAPE)
    twice.write_text(SCRAPE + SCRAPE)
    code, out, err = cli("trace", "import", once, "--from", "vllm-metrics")
    assert code == 0 and not err, err
    code, out2, err = cli("trace", "import", twice, "--from", "vllm-metrics")
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "6 series repeated" in lines[0], err
    assert "counted once" in lines[0]
    doc = json.loads(out2)
    assert doc["acceptance"] == [pytest.approx(P0)] == json.loads(out)["acceptance"]
    assert doc["counts"]["drafts"] == 1000


# item 7: counts are whole, finite and bounded

@pytest.mark.parametrize(("old", "new", "words"), [
    ("} 1000.0", "} 300.5", ("num_drafts", "300.5", "whole number")),
    ("} 650.0", "} 1e300", ("position=\"0\"", "whole number")),
    ("} 1000.0", "} +Inf", ("spec_decode_num_drafts is inf",)),
    ("} 1000.0", "} 1.2.3", ("not Prometheus text", "line 3")),
    ('position="2"', 'position="99999999999"', ("position past the 1024",)),
    ('position="2"', 'position="1000"', ("has no position 2",)),
    ("} 1000.0", "} " + "9" * 5000, ("whole number",)),
], ids=["fraction", "1e300", "inf", "1.2.3", "huge-position", "position-gap", "5000-digits"])
def test_bad_vllm_numbers_are_refused(cli: Cli, tmp_path: Path, old: str, new: str,
                                      words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, SCRAPE.replace(old, new, 1), ("--from", "vllm-metrics"),
                   *words)


def test_engines_whose_sum_passes_the_largest_count_are_refused(cli: Cli,
                                                                 tmp_path: Path) -> None:
    big = SCRAPE.replace("} 1000.0", "} 900000000000000.0")
    other = "\n".join(line.replace('engine="0"', 'engine="1"') for line in big.splitlines()
                      if "num_drafts" in line and not line.startswith("#"))
    import_refused(cli, tmp_path, big + other + "\n", ("--from", "vllm-metrics"),
                   "num_drafts is 1800000000000000", "1e+15")


@pytest.mark.parametrize(("content", "words"), [
    ('{"drafts": 1e308, "accepted_per_position": [3]}', ("drafts", "1e+308", "1e+15")),
    ('{"drafts": 300.5, "accepted_per_position": [3]}', ("drafts", "300.5", "whole count")),
    ('{"drafts": 10, "accepted_per_position": [' + "9" * 5000 + "]}", ("not JSON",)),
    ('{"drafts": 10, "accepted_per_position": [' + ", ".join(["1"] * 2000) + "]}",
     ("2000 positions",)),
    ('{"drafts": 10, "accepted_per_position": [3], "pad": "' + "x" * (1 << 20) + '"}',
     ("bytes, over the 1,048,576",)),
], ids=["1e308", "fraction", "5000-digits", "2000-positions", "over-1MiB"])
def test_bad_counts_json_is_refused_without_numpy_warnings(cli: Cli, tmp_path: Path,
                                                           content: str,
                                                           words: tuple[str, ...]) -> None:
    import_refused(cli, tmp_path, content, ("--from", "json"), *words)


# item 7: SGLang's numbers, named by line

@pytest.mark.parametrize(("running", "mean", "words"), [
    ("3", "2.85.", ("line 3", "accept len '2.85.'", "not a number")),
    ("3", "1.2.3", ("line 3", "'1.2.3'")),
    ("9" * 5000, "2.0", ("line 3", "#running-req", "whole number")),
    ("3", "1" * 5000, ("line 3", "accept len", "not a number")),
    ("-3", "2.0", ("line 3", "#running-req '-3'")),
], ids=["2.85.", "1.2.3", "5000-digit-count", "5000-digit-length", "negative"])
def test_malformed_sglang_numbers_name_their_line(cli: Cli, tmp_path: Path, running: str,
                                                  mean: str, words: tuple[str, ...]) -> None:
    good = DECODE.format(r=3, m="2.1760")
    log = "INFO: started\n" + good + DECODE.format(r=running, m=mean) + good
    import_refused(cli, tmp_path, log, SGLANG, *words)


def test_a_non_utf8_line_is_named(cli: Cli, tmp_path: Path) -> None:
    import_refused(cli, tmp_path, SCRAPE.encode() + b"# \xff\xfe\n",
                   ("--from", "vllm-metrics"), "line 9", "not UTF-8")


# item 6: bounded reads

def test_a_file_too_big_to_read_in_time_is_refused_before_reading(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSCOPE_TIME_LIMIT_MIN", "0.0001")  # 6 ms: 120 kB at 20 MB/s
    content = SCRAPE + "# padding\n" * 50_000
    import_refused(cli, tmp_path, content, ("--from", "vllm-metrics"), "--from vllm-metrics",
                   "SPECSCOPE_TIME_LIMIT_MIN")
    import_refused(cli, tmp_path, DECODE.format(r=3, m="2.0") * 2000, SGLANG,
                   "--from sglang-log")


def test_a_long_line_is_skipped_unread_unless_it_is_a_counter(cli: Cli,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_text("# " + "x" * 300_000 + "\n" + SCRAPE)
    code, out, err = cli("trace", "import", path, "--from", "vllm-metrics")
    assert code == 0 and json.loads(out)["acceptance"] == [pytest.approx(P0)], err
    long_label = 'vllm:spec_decode_num_drafts_total{x="' + "y" * 100_000 + '"} 1.0\n'
    import_refused(cli, tmp_path, SCRAPE + long_label, ("--from", "vllm-metrics"),
                   "line 9", "longer than")


RSS_CHECK = """
import resource, sys
from pathlib import Path
from specscope.interop.trace_import import import_file
from specscope.interop.families import TopK
path, origin = Path(sys.argv[1]), sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
doc = import_file(path, origin, setting=TopK(3, 1, 4))
print(doc["acceptance"][0], (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


@pytest.mark.parametrize("origin", ["vllm-metrics", "sglang-log"])
def test_a_big_file_is_read_in_bounded_memory(tmp_path: Path, origin: str) -> None:
    """A 20 MB file grows the reader by far less than the file (the old whole-text parse grew
    it by over ten times the file)."""
    path = tmp_path / "big.txt"
    with path.open("w") as f:
        if origin == "vllm-metrics":
            f.write(SCRAPE)
            block = "".join(f'vllm:other_seconds_bucket{{le="{i}",model_name="m"}} {i}.0\n'
                            for i in range(1000))
        else:
            block = ("INFO: other line\n" * 3 + DECODE.format(r=3, m="2.1760")) * 200
        while f.tell() < 20e6:
            f.write(block)
    result = subprocess.run([sys.executable, "-c", RSS_CHECK, str(path), origin],
                            capture_output=True, text=True, timeout=120, check=True,
                            env={**os.environ, "SPECSCOPE_TIME_LIMIT_MIN": "60"})
    p0, grown_mb = map(float, result.stdout.split())
    assert p0 == pytest.approx(P0 if origin == "vllm-metrics" else 0.6, abs=1e-3)
    assert grown_mb < 30, f"the reader grew by {grown_mb:.0f} MB on a 20 MB file"


# item 6: bounded waits

class Slow(BaseException):
    """The command ran past the limit a refusal must meet (not an `Exception`: the command
    line's last-resort handler must not catch it)."""


def _alarm(_: int, __: FrameType | None) -> None:
    raise Slow


def serve_bench(cli: Cli, *args: object, limit_s: int = 60) -> tuple[int, str, str]:
    """`specscope serve-bench ARGS`, failed after `limit_s` seconds (a run that waits for its
    arrivals fails the test instead of hanging it)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    try:
        return cli("serve-bench", "--target", "tiny-code", "--device", "cpu", *args)
    except Slow:
        pytest.fail(f"serve-bench {' '.join(map(str, args))}: still running after {limit_s} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_arrivals_past_the_time_limit_are_refused_before_any_model_runs(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECSCOPE_TIME_LIMIT_MIN", raising=False)
    refused(serve_bench(cli, "--rate", "1e-9", "--requests", "3"), "--rate 1e-09 with --requests 3",
            "last arrival", "over the limit of 10 min", "SPECSCOPE_TIME_LIMIT_MIN")
    arrivals = tmp_path / "arrivals.txt"
    arrivals.write_text("0\n1\n100000\n")
    before = digest(arrivals)
    refused(serve_bench(cli, "--rate", "1", "--requests", "3", "--arrival-file", arrivals),
            f"--arrival-file {arrivals}", "100,000 s")
    assert digest(arrivals) == before


def test_serve_bench_warns_of_prompts_past_the_trained_context(cli: Cli,
                                                                tmp_path: Path) -> None:
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"prompt": "def f(x):\n" * 200}) + "\n")
    code, out, err = serve_bench(cli, "--rate", "100", "--requests", "1", "--prompts", prompts,
                                 "--output-len", "2", "--chunked-prefill", "256", "--json")
    assert code == 0, err
    lines = [line for line in err.strip().splitlines() if "warning" in line]
    assert len(lines) == 1 and "512-token trained context" in lines[0], err
    assert f"--prompts {prompts}" in lines[0] and "--output-len 2" in lines[0]
    assert json.loads(out)["arrivals"] == 1
