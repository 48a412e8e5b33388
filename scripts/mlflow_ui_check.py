"""What a reviewer sees first in the MLflow UI, checked in a real browser, with screenshots.

    python scripts/mlflow_ui_check.py [--db mlflow.db] [--out ui-screenshots]

Starts ``mlflow server`` on 127.0.0.1 over the given sqlite database (the one a sweep wrote),
opens it in headless Chromium (Debian's ``chromium`` package, driven by Playwright from pip
with ``executable_path``; no browser is downloaded) and checks that
- the newest sweep's parent run shows its recommendation on its Overview,
- the runs table, in jacbench's saved view, lists the readable columns and the problems,
- the report renders in the artifact viewer.
It saves a screenshot of each page and prints what it found; exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jacbench.record.mlflow_run import view_url

CHROMIUM = "/usr/bin/chromium"
EXPANDER = "runnamecellrenderer.tsx_46"  # the +/- before a parent run's name
# What the runs table must show (column headers and cell text) in jacbench's saved view.
TABLE_TEXTS = ["time_median_ms", "err_eps", "log10_rel_err", "strategy", "Dataset"]
# The runs table itself (ag-grid): read apart from the experiment's description above it,
# which names the same columns and is drawn before the table has loaded.
GRID = ".ag-root-wrapper"


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


def check_ui(url: str, db: Path, out: Path, chromium: str = CHROMIUM) -> Findings:
    """Open the pages a reviewer opens first, check their text, save screenshots."""
    from playwright.sync_api import sync_playwright

    experiment_id, run_id, recommended = newest_sweep(db)
    found = Findings(recommendation=recommended)
    out.mkdir(parents=True, exist_ok=True)
    run_page = view_url(url, experiment_id, run_id)
    pages = {
        "runs_table": view_url(url, experiment_id),
        "parent_overview": run_page,
        "report": run_page.replace("?", "/artifacts/report/report.html?"),
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for name, address in pages.items():
            page.goto(address)
            text = _settled_text(page, name)
            _close_assistant(page)
            if name == "runs_table":
                _expand_sweep(page)
                text = _table_text(page)
            shot = out / f"{name}.png"
            page.screenshot(path=str(shot))
            found.screenshots.append(shot)
            if name == "runs_table":
                for wanted in TABLE_TEXTS:
                    found.expect(wanted in text, f"runs table: no {wanted!r}")
            elif name == "parent_overview":
                found.expect("Recommended" in text, "parent Overview: no 'Recommended'")
                best = recommended.split(", ")[0]
                found.expect(bool(best) and best in text, f"parent Overview: no {best!r}")
            else:
                frame_text = "".join(f.inner_text("body") for f in page.frames[1:] if f.url)
                found.expect("Recommendation" in frame_text, "report.html: not rendered")
        browser.close()
    return found


def _close_assistant(page) -> None:
    """MLflow 3.17 opens its assistant panel over a third of the page on the first visit."""
    close = page.get_by_role("button", name="Close", exact=True)
    for button in close.all():
        if button.is_visible():
            button.click()
            page.wait_for_timeout(500)
            return


def _expand_sweep(page) -> None:
    """Show the newest sweep's job runs (MLflow nests them under the parent run)."""
    expand = page.locator(f"[data-component-id$='{EXPANDER}']").first
    if expand.count():
        expand.click()
        page.wait_for_timeout(1500)


def _table_text(page, timeout: float = 30) -> str:
    """The runs table's text once it shows every wanted column (it loads after the page)."""
    deadline = time.monotonic() + timeout
    while True:
        grid = page.locator(GRID)
        text = grid.first.inner_text() if grid.count() else ""
        if all(wanted in text for wanted in TABLE_TEXTS) or time.monotonic() > deadline:
            return text
        page.wait_for_timeout(500)


def _settled_text(page, name: str, timeout: float = 30) -> str:
    """The page's text once MLflow's single-page app has drawn what it is waiting for."""
    if name == "runs_table":
        return _table_text(page, timeout)
    marker = {"parent_overview": "Recommended"}.get(name)
    deadline = time.monotonic() + timeout
    while True:
        text = page.inner_text("body")
        if marker is None or marker in text or time.monotonic() > deadline:
            if marker is None:
                page.wait_for_timeout(3000)  # the artifact iframe
            return page.inner_text("body")
        page.wait_for_timeout(500)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("mlflow.db"), help="sqlite database")
    parser.add_argument("--out", type=Path, default=Path("ui-screenshots"), help="PNG folder")
    parser.add_argument("--chromium", default=CHROMIUM, help="the Chromium executable")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        parser.error(f"{args.db} does not exist: run a sweep first (python -m jacbench -m ...)")
    args.out.mkdir(parents=True, exist_ok=True)
    with mlflow_server(args.db, args.out / "server.log") as url:
        found = check_ui(url, args.db, args.out, args.chromium)
    for shot in found.screenshots:
        print(f"screenshot: {shot}")
    for problem in found.problems:
        print(f"FAILED: {problem}")
    print("all checks passed" if not found.problems else f"{len(found.problems)} check(s) failed")
    return 1 if found.problems else 0


if __name__ == "__main__":
    sys.exit(main())
