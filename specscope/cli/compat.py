"""What the command line takes from typer, the same across the typer versions it supports.

typer ≥ 0.26 vendors click as `typer._click` (0.28 adds `typer.TyperException` over its errors;
0.29 also needs pydantic); older typer runs on click itself. The GPU image holds a typer of its
own, which the runbook (`benchmarks/gpu_run.sh`) shadows with a carried typer 0.28.0, the newest
that needs no pydantic; tests/test_gpu_run.py runs the CLI under the oldest typer `pyproject.toml`
allows.
"""

from __future__ import annotations

import typer

try:
    from typer._click import exceptions
    from typer._click.core import Context, ParameterSource
except ImportError:  # typer < 0.26: click's own
    from click import exceptions
    from click.core import Context, ParameterSource


class _NeverRaised(Exception):
    """Stands for an exception this click does not have."""


__all__ = ["USAGE_ERRORS", "Context", "NoArgsIsHelpError", "ParameterSource"]

NoArgsIsHelpError: type[Exception] = getattr(exceptions, "NoArgsIsHelpError", _NeverRaised)
"""A group called alone (click ≥ 8.2 and typer ≥ 0.26 raise it; older click prints the help and
exits 0 itself)."""
USAGE_ERRORS: tuple[type[Exception], ...] = (getattr(typer, "TyperException",
                                                     exceptions.ClickException),)
"""Usage errors and bad option values: what the command line prints as one line, exit 2."""
