"""The quickstart notebook in a real JupyterLab, driven by headless Chromium (Playwright).

Start JupyterLab on a free port with a scratch HOME and a token, open a copy of
01-quickstart, run all cells, press Start, then check what a user would see: plotly
figures with data, a non-blank NGL canvas, the Start button changed, and no widget
error. Then two longer runs, each recording more frames than the panels keep (so the
adjacency slider shrinks while it is drawn), the second with fewer replicas than the one
the menus show (so they reset while their panels draw), must reach their last step: a
workbench that hangs fails here. Screenshots go to ``artifacts/browser/``. See docs/browser-test.md.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "01-quickstart.ipynb"
SPEEDUP_NOTEBOOK = ROOT / "notebooks" / "03-speedup-demo.ipynb"
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
TOKEN = "workbench-browser-test"
WIDGET_ERRORS = ("javascript error", "Failed to load", "not registered", "Loading widget")

pytestmark = pytest.mark.browser


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install -y chromium)"
    for module in ("playwright", "jupyterlab", "PIL", "nglview", "plotly"):
        if importlib.util.find_spec(module) is None:
            return f"python package {module!r} not installed (pip install -e '.[dev]')"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(port: int, server: subprocess.Popen, timeout: float = 60.0) -> None:
    url = f"http://127.0.0.1:{port}/api/status?token={TOKEN}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer on port {port} within {timeout} s")


@pytest.fixture
def lab(tmp_path):
    """A running JupyterLab serving a scratch folder with a copy of the quickstart."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "lab"
    home = tmp_path / "home"
    root.mkdir()
    home.mkdir()
    # every cell stays rendered (no windowing), so that outputs below the fold are checked
    settings = home / ".jupyter/lab/user-settings/@jupyterlab/notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    for notebook in (NOTEBOOK, SPEEDUP_NOTEBOOK):
        shutil.copy(notebook, root / notebook.name)
    port = _free_port()
    # the notebooks' kernels run as a user's without a GPU: no Triton interpreter (see
    # test_notebooks.py)
    env = {**os.environ, "HOME": str(home), "WORKBENCH_SHORT": "1", "PYTHONWARNINGS": "ignore",
           "TRITON_INTERPRET": "0"}
    log = open(tmp_path / "jupyter.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.port_retries=0",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    try:
        _wait_for_server(port, server)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "jupyter.log", ARTIFACTS / "jupyter.log")


def _wait_kernel_idle(page, timeout_ms: int = 60000) -> None:
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]", timeout=timeout_ms)
    page.wait_for_function(
        "() => (document.querySelector('#jp-main-statusbar')?.innerText || '').includes('Idle')",
        timeout=timeout_ms,
    )


def _run_all(page) -> None:
    """Run All Cells from the menu, and again if no cell started within 30 s (a click
    that lands while JupyterLab is still settling is lost)."""
    started = """() => [...document.querySelectorAll('.jp-InputPrompt')]
                      .some(p => /\\[(\\*|\\d+)\\]/.test(p.innerText))"""
    for attempt in range(2):
        page.click("#jp-menu-panel >> text=Run")
        page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
        try:
            page.wait_for_function(started, timeout=30000)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: try once more
            if attempt:
                raise


def _dismiss_news_toast(page) -> None:
    """Answer JupyterLab's "notified about official Jupyter news?" toast if it is shown."""
    toast = page.locator(".jp-toast-button", has_text="No")
    if toast.count():
        toast.first.click()


def _canvas_stats(png: bytes) -> tuple[float, int]:
    """Fraction of pixels that differ from the corner colour, and number of colours."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = [image.getpixel((x, y)) for y in range(image.height) for x in range(image.width)]
    background = pixels[0]
    differing = sum(
        1 for p in pixels if max(abs(a - b) for a, b in zip(p, background, strict=True)) > 12
    )
    return differing / len(pixels), len(set(pixels))


def _line_traces_with_data(page) -> int:
    """Plotly line traces whose path has at least two points."""
    paths = page.eval_on_selector_all(
        ".main-svg .scatterlayer .trace path.js-line", "els => els.map(e => e.getAttribute('d'))"
    )
    return sum(1 for d in paths if d and re.search(r"[LC]", d))


#: Steps (one frame each) of the long runs: more than the 200 frames the panels keep.
LONG_RUN_STEPS = 260


def _set_number(page, label: str, value: int) -> None:
    """Type ``value`` into the Launch panel's number field called ``label``."""
    field = page.locator(
        f".jp-OutputArea-output .widget-inline-hbox:has(label:text-is('{label}')) input"
    ).first
    field.fill(str(value))
    field.press("Enter")


def _run_to_the_end(page, start, steps: int, timeout_ms: int = 240000) -> None:
    """Press Start, see the new run begin, and wait until the status line says it finished
    ``steps`` steps."""
    finished = f"""() => [...document.querySelectorAll('.jp-OutputArea-output .widget-html')]
                        .some(e => e.innerText.includes('finished {steps} steps'))"""
    start.first.click()
    page.wait_for_function(f"() => !({finished})()", timeout=60000)
    page.wait_for_function(finished, timeout=timeout_ms)


def test_quickstart_runs_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    console: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(f"http://127.0.0.1:{lab}/lab/tree/{NOTEBOOK.name}?token={TOKEN}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
            _wait_kernel_idle(page)
            _run_all(page)
            start = page.locator(".jp-OutputArea-output button.widget-button", has_text="Start")
            start.first.wait_for(timeout=120000)
            page.wait_for_selector(".jp-OutputArea-output canvas", timeout=60000)
            page.wait_for_timeout(4000)
            page.screenshot(path=str(ARTIFACTS / "01-before-start.png"), full_page=True)

            _dismiss_news_toast(page)
            start.first.click()
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-OutputArea-output button')]
                        .some(b => /Running|Start new run/.test(b.innerText))""",
                timeout=60000,
            )
            started_label = page.locator(
                ".jp-OutputArea-output button.widget-button", has_text=re.compile("Running|new run")
            ).first.inner_text()
            page.wait_for_function(
                """() => [...document.querySelectorAll('.scatterlayer .trace path.js-line')]
                        .filter(p => /[LC]/.test(p.getAttribute('d') || '')).length >= 3""",
                timeout=180000,
            )
            page.wait_for_timeout(8000)

            page.screenshot(path=str(ARTIFACTS / "02-running.png"), full_page=True)
            canvas = page.locator(".jp-OutputArea-output canvas").first
            canvas.scroll_into_view_if_needed()
            canvas_png = canvas.screenshot(path=str(ARTIFACTS / "03-ngl-canvas.png"))
            plots = page.locator(".jp-OutputArea-output .js-plotly-plot").first
            plots.screenshot(path=str(ARTIFACTS / "04-throughput-plot.png"))
            texts = page.eval_on_selector_all(
                ".jp-OutputArea-output", "els => els.map(e => e.innerText)"
            )
            data_url_length = canvas.evaluate("c => c.toDataURL().length")
            svgs = page.locator(".jp-OutputArea-output .main-svg").count()
            traces = _line_traces_with_data(page)

            # long runs, twice: the frame buffer thins past 200 frames and a new run
            # shrinks the adjacency slider again; a hang never says "finished"
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-OutputArea-output button')]
                        .some(b => b.innerText.includes('Start new run'))""",
                timeout=240000,
            )
            _set_number(page, "steps", LONG_RUN_STEPS)
            _set_number(page, "save interval", 1)
            _run_to_the_end(page, start, LONG_RUN_STEPS)
            # the user looks at the last replica, which the next run (one replica) lacks:
            # every replica menu resets while its panel draws
            menus = page.locator(
                ".jp-OutputArea-output .widget-dropdown:has(label:text-is('replica')) select"
            )
            for index in range(menus.count()):
                menus.nth(index).select_option(label="replica 1")
            _set_number(page, "replicas", 1)
            _run_to_the_end(page, start, LONG_RUN_STEPS)
            page.screenshot(path=str(ARTIFACTS / "05-after-long-runs.png"), full_page=True)
        finally:
            (ARTIFACTS / "console.log").write_text("\n".join(console))
            browser.close()

    shown = "\n".join(texts)
    for marker in WIDGET_ERRORS:
        assert marker not in shown, f"a widget shows {marker!r}"
    widget_console_errors = [
        line
        for line in console
        if line.startswith("error") and any(m in line for m in ("Failed to load", "not registered"))
    ]
    assert not widget_console_errors, widget_console_errors
    assert "Error:" not in shown, "the workbench reports an error: " + shown[:2000]
    assert re.search(r"Running|new run", started_label)
    assert svgs > 0 and traces >= 3, f"{svgs} plotly svgs, {traces} line traces with data"
    fraction, colours = _canvas_stats(canvas_png)
    assert data_url_length > 10000, f"NGL canvas looks blank (toDataURL length {data_url_length})"
    assert fraction > 0.005 and colours > 50, f"NGL canvas: {fraction:.3%} drawn, {colours} colours"


def _heatmap_z(page) -> str:
    """The z matrix of the page's adjacency heatmap, as JSON (plotly's own data)."""
    return page.evaluate(
        """() => {
            const plots = [...document.querySelectorAll('.js-plotly-plot')];
            const gd = plots.find(p => (p.data || []).some(t => t.type === 'heatmap'));
            const trace = gd.data.find(t => t.type === 'heatmap');
            return JSON.stringify(Array.from(trace.z, row => Array.from(row)));
        }"""
    )


def _pixel_change(before: bytes, after: bytes) -> float:
    """Fraction of pixels that differ between two screenshots of the same element."""
    from PIL import Image, ImageChops

    a = Image.open(io.BytesIO(before)).convert("RGB")
    b = Image.open(io.BytesIO(after)).convert("RGB").resize(a.size)
    diff = ImageChops.difference(a, b).convert("L").point(lambda v: 255 if v > 24 else 0)
    return diff.histogram()[255] / (a.width * a.height)


def test_the_recorded_unfolding_replays_with_its_time_slider(lab):
    """Open the shipped 1ENH run in the Replay tab, move the time slider to the first frame:
    the adjacency matrix and the 3-D view change."""
    from playwright.sync_api import sync_playwright

    from workbench.run_folder import recorded_run

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(f"http://127.0.0.1:{lab}/lab/tree/{NOTEBOOK.name}?token={TOKEN}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
            _wait_kernel_idle(page)
            _run_all(page)
            page.wait_for_selector(".jp-OutputArea-output canvas", timeout=120000)
            _dismiss_news_toast(page)
            page.locator(".jp-OutputArea-output .lm-TabBar-tab", has_text="Replay").click()
            path = page.locator(".jp-OutputArea-output input[placeholder^='run folder']")
            path.fill(str(recorded_run("1enh-unfolding")))
            path.press("Enter")
            page.locator(".jp-OutputArea-output button", has_text="Open").click()
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-OutputArea-output .widget-html')]
                        .some(e => e.innerText.includes('frame 200 of 200'))""",
                timeout=60000,
            )
            page.wait_for_timeout(6000)  # NGL loads 1ENH, then the last frame is pushed
            canvas = page.locator(".jp-OutputArea-output canvas").first
            canvas.scroll_into_view_if_needed()
            last_view = canvas.screenshot(path=str(ARTIFACTS / "06-replay-last-frame.png"))
            last_matrix = _heatmap_z(page)

            readout = page.locator(
                ".jp-OutputArea-output .widget-slider:has(label:text-is('time')) .widget-readout"
            ).first
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("0")
            page.keyboard.press("Enter")
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-OutputArea-output .widget-html')]
                        .some(e => e.innerText.includes('frame 1 of 200'))""",
                timeout=60000,
            )
            page.wait_for_timeout(3000)
            canvas.scroll_into_view_if_needed()
            first_view = canvas.screenshot(path=str(ARTIFACTS / "07-replay-first-frame.png"))
            first_matrix = _heatmap_z(page)
            page.screenshot(path=str(ARTIFACTS / "08-replay.png"), full_page=True)
        finally:
            browser.close()

    assert first_matrix != last_matrix, "the adjacency matrix did not follow the time slider"
    change = _pixel_change(last_view, first_view)
    assert change > 0.01, f"the 3-D view did not follow the time slider ({change:.2%} changed)"

#: Elements of projector-mode panels whose content is cut off: text wider than a box that
#: hides its overflow, or anything reaching past the right edge of its output area.
CLIPPED_JS = """() => {
    const found = [];
    const name = el => `${el.tagName.toLowerCase()}.${[...el.classList].join('.')}`
        + ` '${(el.innerText || el.value || '').trim().slice(0, 40)}'`;
    for (const root of document.querySelectorAll('.jp-OutputArea-output .cgw-projector')) {
        const area = root.closest('.jp-OutputArea-output').getBoundingClientRect();
        for (const el of [root, ...root.querySelectorAll('*')]) {
            if (el.closest('.js-plotly-plot') && !el.classList.contains('js-plotly-plot')) continue;
            const style = getComputedStyle(el);
            const box = el.getBoundingClientRect();
            if (style.display === 'none' || style.visibility === 'hidden' || !box.width) continue;
            const hides = ['hidden', 'clip'].includes(style.overflowX)
                || style.textOverflow === 'ellipsis';
            if (hides && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'SELECT') {
                found.push(`cut: ${name(el)} (${el.scrollWidth} > ${el.clientWidth})`);
            }
            if (box.right > area.right + 1) {
                found.push(`past the edge: ${name(el)} (${box.right} > ${area.right})`);
            }
        }
    }
    return found;
}"""


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=["1280x720", "1920x1080"])
def test_the_speedup_demo_in_projector_mode_clips_nothing(lab, size):
    """The speedup demo, run whole in projector mode at a projector's resolution with the
    file browser open: no control, text or plot is cut off (screenshots kept)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    width, height = size
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            name = SPEEDUP_NOTEBOOK.name
            page.goto(f"http://127.0.0.1:{lab}/lab/tree/{name}?token={TOKEN}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
            _wait_kernel_idle(page)
            _dismiss_news_toast(page)
            _run_all(page)
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-OutputArea-output')]
                        .some(e => e.innerText.includes('walk done'))""",
                timeout=240000,
            )
            _wait_kernel_idle(page, timeout_ms=240000)
            clipped = []
            roots = page.locator(".jp-OutputArea-output .cgw-projector")
            panels = roots.count()
            for index in range(panels):
                roots.nth(index).scroll_into_view_if_needed()
                page.wait_for_timeout(1500)
                page.screenshot(
                    path=str(ARTIFACTS / f"09-projector-{width}x{height}-{index}.png")
                )
                clipped += page.evaluate(CLIPPED_JS)
        finally:
            browser.close()
    assert panels >= 3  # the switch, the race and the live switches
    assert not clipped, "clipped in projector mode:\n" + "\n".join(sorted(set(clipped)))
