"""What a reviewer sees first in the MLflow UI, checked in a real browser, with screenshots.

    python scripts/mlflow_ui_check.py [--db mlflow.db] [--out ui-screenshots] [--printed log]

Starts ``mlflow server`` on 127.0.0.1 over the given sqlite database (the one a sweep wrote),
opens it in headless Chromium at 1440x900 (Debian's ``chromium`` package, driven by
Playwright from pip with ``executable_path``; no browser is downloaded) and checks, on the
newest sweep, what a reviewer with 30 seconds looks at:
- the results table, opened from the link the sweep printed (``--printed``: its output;
  default: the link jacbench prints): MLflow's own model-training runs table (not the GenAI
  page), the sweep's run listed; expanded, its answer runs first, and with the answer's
  columns picked in MLflow's Columns menu (its default table shows no metric), each answer
  (a sweep of one problem: the sweep's run) shows its time, err_eps and settled, not "-";
- the parent run's Overview: no horizontal overflow, the recommendation on the first screen;
- the parent's images (the report's time figure among the run's images);
- the report rendered in the artifact viewer.
It saves a screenshot of each page and prints what it found; exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jacbench.record.mlflow_run import ui_url

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1440, "height": 900}
EXPANDER = "runnamecellrenderer.tsx_46"  # the +/- before a parent run's name
# The answer's columns a reviewer picks in MLflow's Columns menu (MLflow lists them by name)
ANSWER_COLUMNS = ["err_eps", "settled", "time_median_ms"]
# The runs table itself (ag-grid): read apart from the experiment's description above it,
# which names the same columns and is drawn before the table has loaded.
GRID = ".ag-root-wrapper"
# Each row's name (in the pinned columns) with its cells in the metric columns ``names``
CELLS = """names => [...document.querySelectorAll('.ag-center-cols-container .ag-row')].map(r => {
  const i = r.getAttribute('row-index');
  const name = document.querySelector(`.ag-pinned-left-cols-container [row-index="${i}"]`);
  const row = {name: name ? name.innerText.replace(/\\s+/g, ' ') : ''};
  for (const n of names) {
    const cell = r.querySelector(`.ag-cell[col-id="metrics.\\`${n}\\`"]`);
    row[n] = cell ? cell.innerText.trim() : null;
  }
  return row;
})"""
LINK = re.compile(r"(results table|this run):\s+(http\S+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(
    db: Path,
    log: Path,
    *options: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 over ``db``, run in ``db``'s folder (its runs' artifacts
    stay where the sweep put them, unless ``options`` say otherwise); ``env``: its environment
    (default: this process's). Yields its base URL and stops it afterwards."""
    port = free_port()
    env = {**(os.environ if env is None else env), "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
    # no job runner (MLflow's asynchronous GenAI jobs, a second Python process): tracking and
    # the UI's tracking pages do not use it, and the server is ready sooner (~10 s instead of
    # ~13 s) and costs half the CPU to start (~11 s instead of 19-25 s)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{db.resolve()}", *options]
    with log.open("w") as out:
        server = subprocess.Popen(
            command, cwd=db.parent, stdout=out, stderr=subprocess.STDOUT, env=env
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while not _healthy(url):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server did not start:\n{log.read_text()}")
                time.sleep(0.5)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@dataclass
class Findings:
    screenshots: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    recommendation: str = ""

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            self.problems.append(what)


def newest_sweep(db: Path) -> tuple[str, str, str]:
    """(experiment id, parent run id, recommended strategy tag) of the newest sweep."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db.resolve()}")
    experiment = client.get_experiment_by_name("jacbench")
    if experiment is None:
        raise SystemExit(f"{db}: no jacbench experiment (run a sweep first)")
    (parent,) = client.search_runs(
        [experiment.experiment_id],
        "tags.`jacbench.role` = 'sweep'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    ) or [None]
    if parent is None:
        raise SystemExit(f"{db}: no sweep run (python -m jacbench -m ...)")
    tag = parent.data.tags.get("recommended_strategy", "")
    return experiment.experiment_id, parent.info.run_id, tag


def printed_links(output: str, url: str) -> dict[str, str]:
    """The links a sweep printed ("results table", "this run"), on this server."""
    links = {name: link for name, link in LINK.findall(output)}
    return {name: re.sub(r"^http://[^/]+", url, link) for name, link in links.items()}


def check_ui(
    url: str, db: Path, out: Path, chromium: str = CHROMIUM, printed: str = ""
) -> Findings:
    """Open the pages a reviewer opens first, check them, save screenshots."""
    from playwright.sync_api import sync_playwright

    experiment_id, run_id, recommended = newest_sweep(db)
    found = Findings(recommendation=recommended)
    out.mkdir(parents=True, exist_ok=True)
    links = printed_links(printed, url) if printed else {}
    run_page = links.get("this run") or ui_url(url, experiment_id, run_id)
    found.expect(f"/runs/{run_id}?" in run_page, "the printed run link is not the sweep's")
    pages = {
        "runs_table": links.get("results table") or ui_url(url, experiment_id),
        "runs_expanded": links.get("results table") or ui_url(url, experiment_id),
        "parent_overview": run_page,
        "parent_images": run_page.replace("?", "/model-metrics?"),
        "report": run_page.replace("?", "/artifacts/report/report.html?"),
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport=VIEWPORT)
        for name, address in pages.items():
            page.goto(address)
            CHECKS[name](page, found, recommended)
            shot = out / f"{name}.png"
            page.screenshot(path=str(shot))
            found.screenshots.append(shot)
        browser.close()
    return found


def _runs_table(page, found: Findings, recommended: str) -> None:
    text = _table_text(page)
    _close_assistant(page)
    found.expect(
        "/runs?" in page.url and "workflowType=machine_learning" in page.url,
        f"results table: opened {page.url}, not the model-training runs table",
    )
    found.expect("Traces 0" not in page.inner_text("body"), "results table: the GenAI page")
    found.expect(" jobs) " in text, f"results table: no sweep's run listed: {text[:300]!r}")


def _runs_expanded(page, found: Findings, recommended: str) -> None:
    """The sweep's run expanded: its answer runs first (one per problem where the sweep has
    several), each with its answer in the columns a reviewer picks (issue 57: never "-"
    where it was measured, settled or not)."""
    _table_text(page)
    _close_assistant(page)
    expander = page.locator(f"[data-component-id*='{EXPANDER}']")
    _wait_for_count(page, expander)  # the header is drawn before the rows, on a busy machine
    found.expect(expander.count() > 0, "expanded results table: no +/- before the sweep's run")
    if expander.count():
        expander.first.click()
        page.wait_for_timeout(2000)
    _pick_columns(page, ANSWER_COLUMNS)
    rows = page.evaluate(CELLS, ANSWER_COLUMNS)
    answers = [row for row in rows if " answer " in f" {row['name']}"] or rows[:1]
    found.expect(bool(answers), "expanded results table: no rows")
    for row in (r for r in answers if " answer none " not in f" {r['name']}"):  # unmeasured
        shown = [row[name] for name in ANSWER_COLUMNS]
        found.expect(
            all(value and re.fullmatch(r"[-\d.e+]*\d", value) for value in shown),
            f"expanded results table: {row['name']!r} shows {shown} in {ANSWER_COLUMNS}",
        )


def _pick_columns(page, names: list[str]) -> None:
    """Show the metric columns ``names`` as a reviewer does: MLflow's Columns menu, each
    found through its search box; the table then scrolled to its right end."""
    page.get_by_role("button", name="Columns").first.click()
    for name in names:
        page.get_by_placeholder("Search columns").fill(name)
        page.wait_for_timeout(500)
        page.get_by_role("dialog").get_by_text(name, exact=True).first.click()
    page.keyboard.press("Escape")
    page.evaluate(
        "() => document.querySelectorAll('.ag-body-horizontal-scroll-viewport,"
        " .ag-center-cols-viewport').forEach(e => { e.scrollLeft = e.scrollWidth; })"
    )
    page.wait_for_timeout(1500)


def _parent_overview(page, found: Findings, recommended: str) -> None:
    _wait_for(page, "Recommended")
    _close_assistant(page)
    wide = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    found.expect(wide[0] <= wide[1], f"parent Overview: {wide[0]} px wide in {wide[1]}")
    head = page.get_by_text("Recommended:").first
    box = head.bounding_box() if head.count() else None
    found.expect(
        box is not None and _on_screen(box),
        "parent Overview: no recommendation on the first screen",
    )
    best = recommended.split(", ")[0]
    found.expect(bool(best) and best in page.inner_text("body"), f"parent Overview: no {best!r}")
    link = page.get_by_role("link", name="the report")
    found.expect(link.count() > 0, "parent Overview: the first line opens no report")
    found.expect(
        "Chart tab" not in page.inner_text("body"), "parent Overview: names a tab runs lack"
    )


# the report's figure a reviewer looks for first: the time figure, or a map's winners (a
# sweep over two numeric axes: the map's 150 problems draw no per-problem time figure)
MAIN_FIGURES = ("time_per_strategy", "map_winner")


def _parent_images(page, found: Findings, recommended: str) -> None:
    """The image card of the report's main figure, scrolled to (MLflow draws cards and loads
    images lazily, as they come into view)."""
    _wait_for(page, "n_jobs")  # the metric cards: the page is drawn
    _close_assistant(page)
    image = page.locator(", ".join(f"img[src*='{name}']" for name in MAIN_FIGURES))
    deadline = time.monotonic() + 20
    while not image.count() and time.monotonic() < deadline:
        for name in MAIN_FIGURES:
            card = page.get_by_text(name, exact=True)
            if card.count():
                card.first.scroll_into_view_if_needed()
                break
        page.mouse.move(VIEWPORT["width"] / 2, VIEWPORT["height"] / 2)  # over the charts
        page.mouse.wheel(0, 500)
        page.wait_for_timeout(1000)
    found.expect(image.count() > 0, f"parent images: none of {', '.join(MAIN_FIGURES)}")
    if image.count():
        image.first.scroll_into_view_if_needed()


def _report(page, found: Findings, recommended: str) -> None:
    page.wait_for_timeout(4000)  # the artifact iframe
    _close_assistant(page)
    frame_text = "".join(f.inner_text("body") for f in page.frames[1:] if f.url)
    found.expect("Recommendation" in frame_text, "report.html: not rendered")


CHECKS = {
    "runs_table": _runs_table,
    "runs_expanded": _runs_expanded,
    "parent_overview": _parent_overview,
    "parent_images": _parent_images,
    "report": _report,
}


def _on_screen(box: dict) -> bool:
    return (
        box["x"] >= 0
        and box["x"] + box["width"] <= VIEWPORT["width"]
        and (box["y"] + box["height"] <= VIEWPORT["height"])
    )


def _wait_for(page, marker: str, timeout: float = 30) -> None:
    """Until MLflow's single-page app has drawn ``marker`` (or ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while marker not in page.inner_text("body") and time.monotonic() < deadline:
        page.wait_for_timeout(500)


def _wait_for_count(page, locator, timeout: float = 30) -> None:
    """Until ``locator`` finds something (or ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not locator.count() and time.monotonic() < deadline:
        page.wait_for_timeout(500)


def _close_assistant(page) -> None:
    """MLflow 3.17 opens its assistant panel over a third of the page on the first visit."""
    close = page.get_by_role("button", name="Close", exact=True)
    for button in close.all():
        if button.is_visible():
            button.click()
            page.wait_for_timeout(500)
            return


def _table_text(page, timeout: float = 30) -> str:
    """The runs table's text once it lists a sweep's run (it loads after the page; every
    sweep's name says how many jobs it ran)."""
    deadline = time.monotonic() + timeout
    while True:
        grid = page.locator(GRID)
        text = grid.first.inner_text() if grid.count() else ""
        if " jobs) " in text or time.monotonic() > deadline:
            return text
        page.wait_for_timeout(500)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("mlflow.db"), help="sqlite database")
    parser.add_argument("--out", type=Path, default=Path("ui-screenshots"), help="PNG folder")
    parser.add_argument("--chromium", default=CHROMIUM, help="the Chromium executable")
    parser.add_argument("--printed", type=Path, help="the sweep's output: check its links")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        parser.error(f"{args.db} does not exist: run a sweep first (python -m jacbench -m ...)")
    args.out.mkdir(parents=True, exist_ok=True)
    with mlflow_server(args.db, args.out / "server.log") as url:
        printed = args.printed.read_text() if args.printed else ""
        found = check_ui(url, args.db, args.out, args.chromium, printed)
    for shot in found.screenshots:
        print(f"screenshot: {shot}")
    for problem in found.problems:
        print(f"FAILED: {problem}")
    print("all checks passed" if not found.problems else f"{len(found.problems)} check(s) failed")
    return 1 if found.problems else 0


if __name__ == "__main__":
    sys.exit(main())
