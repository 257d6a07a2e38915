"""The report in a real browser: Debian's headless Chromium, driven over the DevTools protocol
on a pipe with the standard library only. Every figure renders, no script fails, nothing is
fetched from anywhere, and a full-page screenshot is saved for a person to look at.

`make test` installs Chromium when it is missing; without it this test fails (set
SPECSCOPE_SKIP_BROWSER=1 to skip it on a machine that cannot install it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from dashboard_fixture import build_results, external_references

from specscope.cli import main

SCREENSHOT = Path(__file__).resolve().parents[1] / "out" / "test-dashboard.png"
WIDTH = 1400
RENDERED = """(() => {
  const plots = Array.from(document.querySelectorAll('.plotly-graph-div'));
  return plots.map(gd => {
    const full = gd._fullData || [];
    const used = new Set(full.filter(t => t.visible !== false)
                             .map(t => (t.xaxis || 'x') + (t.yaxis || 'y')));
    const subplots = Object.keys((gd._fullLayout && gd._fullLayout._plots) || {});
    return {id: gd.id, svg: gd.querySelectorAll('svg.main-svg').length,
            traces: full.length,
            drawn: gd.querySelectorAll('.cartesianlayer .trace, .heatmaplayer .hm').length,
            marks: gd.querySelectorAll('.cartesianlayer .point, .cartesianlayer .js-line, '
                                       + '.cartesianlayer .js-fill, .heatmaplayer image').length,
            empty: subplots.filter(s => !used.has(s)), height: gd.clientHeight};
  });
})()"""


class Chromium:
    """Headless Chromium with `--remote-debugging-pipe`: commands go to its fd 3, replies and
    events come from its fd 4, each a JSON message ended by a NUL byte."""

    def __init__(self, binary: str, height: int = 900) -> None:
        to_browser, self._in = os.pipe()
        self._out, from_browser = os.pipe()
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--hide-scrollbars", "--remote-debugging-pipe", f"--window-size={WIDTH},{height}"]
        self.proc = subprocess.Popen(  # bash puts the pipe ends on fds 3 and 4
            ["bash", "-c", f'exec "$@" 3<&{to_browser} 4>&{from_browser}', "chromium", *args],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next, self.events = b"", 0, []
        self.session: str | None = None

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Run one command (on the attached page, once there is one) and return its result."""
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._in, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first event named `method`, waiting for it if it has not come yet."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self._read(deadline))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        """End the browser (the process this test started)."""
        os.close(self._in)
        self.proc.terminate()
        self.proc.wait(timeout=10)
        os.close(self._out)


def chromium_binary() -> str:
    """Debian's chromium; its absence fails the test unless SPECSCOPE_SKIP_BROWSER is set."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("SPECSCOPE_SKIP_BROWSER"):
        pytest.skip("chromium is not installed and SPECSCOPE_SKIP_BROWSER is set")
    pytest.fail("the dashboard's browser test needs Debian's chromium: `make test` installs it "
                "(apt-get install chromium); set SPECSCOPE_SKIP_BROWSER=1 to skip it locally")


@pytest.mark.slow
def test_report_renders_every_figure_offline_without_errors(tmp_path: Path) -> None:
    binary = chromium_binary()
    folder = build_results(tmp_path / "results", validate=True)
    report = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exit_:
        main(["dashboard", str(folder), "-o", str(report)])
    assert exit_.value.code == 0
    page = report.read_text()
    assert external_references(page) == []
    expected = re.findall(r'<div id="(figure-[a-z]+)" class="plotly-graph-div"', page)
    assert len(expected) == 8, expected

    browser = Chromium(binary)
    try:
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        browser.session = browser.send("Target.attachToTarget", targetId=target,
                                       flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable")
        browser.send("Page.navigate", url=report.as_uri())
        browser.wait_for("Page.loadEventFired")
        plots = _rendered(browser, len(expected))
        height = browser.evaluate("document.documentElement.scrollHeight")
        browser.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height,
                     deviceScaleFactor=1, mobile=False)
        plots = _rendered(browser, len(expected))
        shot = browser.send("Page.captureScreenshot", format="png", timeout=60)
    finally:
        browser.close()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.write_bytes(__import__("base64").b64decode(shot["data"]))
    print(f"screenshot of the report: {SCREENSHOT}")

    assert [p["id"] for p in plots] == expected
    for p in plots:
        assert p["svg"] > 0 and p["traces"] > 0 and p["drawn"] > 0 and p["marks"] > 0, p
        assert p["empty"] == [], f"{p['id']}: panels without a trace: {p['empty']}"
        assert p["height"] > 200, p
    errors = [e["params"] for e in browser.events if e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert"))
              or (e.get("method") == "Log.entryAdded"
                  and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    fetched = [e["params"]["request"]["url"] for e in browser.events
               if e.get("method") == "Network.requestWillBeSent"]
    assert all(url == report.as_uri() or url.startswith("data:") for url in fetched), fetched


def _rendered(browser: Chromium, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The plot statistics once `count` plots have drawn and stayed unchanged for a moment."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        plots = browser.evaluate(RENDERED)
        if len(plots) == count and all(p["svg"] for p in plots) and plots == last:
            return plots
        last = plots
        time.sleep(0.5)
    return last or []
