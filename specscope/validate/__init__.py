"""Predictions against real runs (`specscope validate`).

- `grid`: the configurations validated (method, drafter, budget, temperature, batch);
- `compare`: calibration and held-out halves, the predictions, the executor's measurements;
- `report`: per-configuration errors, summaries, which component carries each miss, the
  recommendation, the printed tables and the parquet table.

Importing this package loads nothing heavy; `compare` imports torch.
"""
