"""`--runtime compile` says on stderr, once per process, that it is compiling before the first
compile starts (compiling takes seconds to minutes, during which nothing else is printed)."""

from __future__ import annotations

import torch

from specscope.executor.runtime import Runtime, StepRunner


def test_the_first_compile_of_a_process_is_announced_once(monkeypatch, capsys) -> None:
    monkeypatch.setattr(StepRunner, "compile_announced", False)
    runtime = Runtime(torch.device("cpu"), torch.float32, "compile")
    runners = [StepRunner(torch.neg, runtime) for _ in range(2)]
    for runner in runners:
        runner.fn = torch.neg  # the uncompiled step: what is said, not how long compiling takes
    assert capsys.readouterr().err == ""
    for runner in runners:
        for size in (1, 2, 1):
            runner(torch.ones(size))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("compiling the steps with torch.compile")


def test_eager_steps_say_nothing(monkeypatch, capsys) -> None:
    monkeypatch.setattr(StepRunner, "compile_announced", False)
    StepRunner(torch.neg, Runtime.cpu())(torch.ones(2))
    assert capsys.readouterr().err == ""
