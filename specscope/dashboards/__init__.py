"""The HTML report of a results folder: Pareto fronts, trees, acceptance, serving under load
(simulated, and simulated against measured), validation errors, a hardware comparison, the seed
systems against their papers and every published row predicted against published
(`specscope dashboard DIR -o report.html`).

- `load`: what a results folder holds, recognised by content.
- `fronts`, `trees`, `acceptance`, `serving`, `load_validation`, `validation`, `hardware`,
  `systems`, `accuracy`: one figure each (`systems`: three).
- `style`: the look and the section record they share; `page`: the self-contained page.
"""

from specscope.dashboards.load import Results, load_results
from specscope.dashboards.page import Report, build_report

__all__ = ["Report", "Results", "build_report", "load_results"]
