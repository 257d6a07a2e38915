"""The seed systems of the field, each a mechanism beside the cost model (one module each), and
`reproduce`, which prices the papers' own setups (`examples/papers/`) against what they published.

`registry.SYSTEMS` maps a case's `system` key to its `System`.
"""
