"""Design-space sweeps: a TOML grid of cells (`config`, `cells`), each evaluated analytically or
by simulation (`evaluate`) in this process or on Ray (`engines`), rows appended to parquet as
cells finish and consolidated at the end (`store`); `run.run_sweep` ties them together."""

from specscope.sweeps.run import SweepResult, run_sweep

__all__ = ["SweepResult", "run_sweep"]
