"""The report: every section's figure on one self-contained HTML page, written atomically.

plotly.js is embedded once in the page's head and each figure is a div that calls it; the page
loads nothing else (no CDN, no MathJax, no web fonts), so it opens offline and can be mailed.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from plotly.offline import get_plotlyjs

from specscope import __version__
from specscope.atomic import write_text_atomic
from specscope.dashboards.acceptance import acceptance_section
from specscope.dashboards.accuracy import accuracy_section
from specscope.dashboards.economics import economics_section
from specscope.dashboards.fronts import pareto_section, size_section
from specscope.dashboards.hardware import hardware_section
from specscope.dashboards.load import Results, load_results
from specscope.dashboards.load_validation import load_validation_section
from specscope.dashboards.serving import serving_section
from specscope.dashboards.style import FONT, Section
from specscope.dashboards.systems import (
    families_section,
    reproduce_section,
    systems_hardware_section,
)
from specscope.dashboards.trees import trees_section
from specscope.dashboards.validation import validation_section
from specscope.errors import InputError

SECTIONS: tuple[Callable[[Results], Section], ...] = (
    pareto_section, size_section, trees_section, acceptance_section, serving_section,
    economics_section,
    load_validation_section, validation_section, hardware_section, systems_hardware_section,
    reproduce_section, families_section, accuracy_section,
)
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
CSS = f"""
body {{ font-family: {FONT}; margin: 0 auto; max-width: 1400px; padding: 0 24px 48px;
       color: #202124; }}
h1 {{ margin: 24px 0 4px; }}
h2 {{ margin: 40px 0 6px; border-top: 1px solid #dadce0; padding-top: 20px; }}
p {{ line-height: 1.45; max-width: 1100px; }}
.meta, .files, .note {{ color: #5f6368; font-size: 14px; }}
.note {{ font-style: italic; }}
nav ol {{ columns: 2; font-size: 15px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td {{ padding: 2px 12px 2px 0; vertical-align: top; }}
"""


@dataclass(frozen=True)
class Report:
    """What `build_report` wrote: the page, its sections, the files read, seconds taken."""

    path: Path
    sections: list[Section]
    results: Results
    seconds: float

    @property
    def drawn(self) -> list[Section]:
        """The sections that have a figure."""
        return [s for s in self.sections if s.figure is not None]


def build_report(folder: str | Path, output: str | Path) -> Report:
    """Read `folder`, draw every section it has data for, and write the page to `output`
    atomically; `InputError` (nothing written) when the folder holds nothing to draw."""
    start = time.perf_counter()
    results = load_results(folder)
    sections = [make(results) for make in SECTIONS]
    if not any(s.figure for s in sections):
        raise InputError(f"{folder}: nothing to draw; the report needs optimize-tree output, "
                         "simulate metrics, validate tables, a sweep or a trace")
    path = write_text_atomic(output, render(sections, results))
    return Report(path, sections, results, time.perf_counter() - start)


def render(sections: list[Section], results: Results) -> str:
    """The whole page: header and contents, one block per section, the files read."""
    drawn = [s for s in sections if s.figure is not None]
    toc = "".join(f'<li><a href="#{s.key}">{html.escape(s.title)}</a></li>' for s in drawn)
    body = "".join(_section(i, s) for i, s in enumerate(drawn, start=1))
    missing = "".join(f"<li>{html.escape(s.title)}: {html.escape(s.note)}</li>"
                      for s in sections if s.figure is None)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specscope report: {html.escape(str(results.root))}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<h1>specscope report</h1>
<p class="meta">Built by specscope {__version__} from <code>{html.escape(str(results.root))}</code>
({results.used} result files). Every number is a prediction of specscope's models unless the
figure says measured. Hover over any point for its details; drag to zoom, double-click to
reset.</p>
<nav><ol>{toc}</ol></nav>
{body}
<h2 id="files">Files</h2>
{f"<p>Not drawn:</p><ul class='note'>{missing}</ul>" if missing else ""}
{_files(results)}
</body>
</html>
"""


def _section(number: int, section: Section) -> str:
    assert section.figure is not None
    div = section.figure.to_html(full_html=False, include_plotlyjs=False,
                                 div_id=f"figure-{section.key}", config=PLOT_CONFIG,
                                 default_height=f"{section.figure.layout.height}px")
    sources = ", ".join(f"<code>{html.escape(s)}</code>" for s in section.sources)
    return (f'<section id="{section.key}"><h2>{number}. {html.escape(section.title)}</h2>\n'
            f"<p><b>What to look for.</b> {html.escape(section.guide)}</p>\n{div}\n"
            f'<p class="files">Drawn from {sources}.</p></section>\n')


def _files(results: Results) -> str:
    ignored = "".join(f"<tr><td><code>{html.escape(results.name(p))}</code></td>"
                      f"<td>{html.escape(why)}</td></tr>" for p, why in results.ignored)
    return (f"<details><summary class='files'>Ignored files ({len(results.ignored)})</summary>"
            f"<table class='files'>{ignored}</table></details>") if ignored else ""
