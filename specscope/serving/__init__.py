"""Serving under load for real: the continuous-batching speculative server (`server.py`) on a
batched target (`executor/batched.py`), the policies run live (`planners.py`), and the load run
that `specscope serve-bench` and `validate --load` time (`bench.py`). It sits above both the
executor and the simulator: it drives the one and mirrors the other's scheduler, entities,
policies and metrics, so simulated and real runs compare rule for rule."""
