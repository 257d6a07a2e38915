"""specscope and the serving engines, both ways.

To an engine: the chosen tree as vLLM, SGLang, TensorRT-LLM or transformers take it
(`optimize-tree --to`, `specscope export`). Each engine module writes the engine's own
configuration (`config_for`), its command line (`command`), reads a configuration back into the
tree the engine verifies (`parse`) and checks it by the rules the engine's source applies
(`check`), citing the file; `families` holds the trees each engine can express and solves for
the best of them on the optimizers' own scoring; `document` sets the export beside the
unconstrained optimum.

From an engine (`specscope trace import`, `trace_import`): `vllm_metrics` and `sglang_log` read
what an engine counted (vLLM's metrics text, SGLang's decode log), and `counters` turns those
counts (or plain per-position counts) into the acceptance every `--acceptance` option takes.
"""
