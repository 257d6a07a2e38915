"""The discrete-event serving simulator: speculation under load (docs/architecture.md#simulator).

- `workload`: arrivals (Poisson, Gamma, a file), prompt and output lengths, chat and forking
  requests;
- `entities`: requests, request groups, a replica's KV memory;
- `scheduler`: the router, admission, fitting a step's trees and prompt chunks to its limits;
- `server`: replicas as simpy processes running prefill and decoding steps;
- `pricing`: seconds of a batched step or prefill on the cost model (`StepPricer`);
- `acceptance`: accepted drafts per step, by trace replay or from the acceptance model;
- `policies`: per-step speculation policies by name;
- `events`, `metrics`: the event log, per-request latencies, the summary, time series;
- `analytic`: closed forms the simulator meets at vanishing load;
- `run`: `specscope simulate` as a library call (`SimulateRequest`, `run_simulation`).
"""
