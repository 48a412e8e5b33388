"""Issue 59: the pages a reviewer opens fit a 1440 px window, and their first screen shows
the answer: report.html (a seed004 sweep, a 30-problem folder, names too long for a cell)
and answer.md as a markdown viewer renders it. Measured in headless Chromium (Debian's
package, driven by Playwright from pip; no browser is downloaded); the screenshots go to
$JACBENCH_UI_SCREENSHOTS if set."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from helpers.cli import NO_MLFLOW, QUICK
from helpers.results import make_result
from jacbench.report.build import write_report
from jacbench.report.problems import normalise

CHROMIUM = "/usr/bin/chromium"
WINDOW = {"width": 1440, "height": 900}
# each table cell's lines of text (the row's height is its tallest cell's: not that)
CELL_LINES = """() => [...document.querySelectorAll('td')].map(td => {
  const range = document.createRange();
  range.selectNodeContents(td);
  const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
  return {text: td.textContent, lines: tops.size, wraps: td.classList.contains('w')};
})"""
# the top of the first element whose own text starts with the given words (null: none)
TOP_OF = """words => {
  for (const e of document.querySelectorAll('body *')) {
    const own = [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('');
    if (own.trim().startsWith(words)) return e.getBoundingClientRect().top;
  }
  return null;
}"""


@dataclass(frozen=True)
class Seen:
    """What the window shows of a page: its width, the cells' lines, where words are."""

    width: int
    cells: list[dict]
    page: object  # the Playwright page, still open

    def top_of(self, words: str) -> float | None:
        return self.page.evaluate(TOP_OF, words)  # type: ignore[attr-defined]

    def short_cells_on_more_lines(self) -> list[str]:
        return [c["text"] for c in self.cells if not c["wraps"] and c["lines"] > 1]


@pytest.fixture(scope="module")
def window() -> Iterator:
    """A 1440 x 900 Chromium window."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium (apt-get install -y --no-install-recommends chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport=WINDOW)
        yield page
        browser.close()


def shown(window, path: Path, name: str) -> Seen:
    """``path`` (HTML) in the window, its first screen saved as a screenshot."""
    window.goto(path.resolve().as_uri())
    out = Path(os.environ.get("JACBENCH_UI_SCREENSHOTS", path.parent))
    out.mkdir(parents=True, exist_ok=True)
    window.screenshot(path=str(out / f"{name}.png"))
    width = window.evaluate("document.documentElement.scrollWidth")
    return Seen(width, window.evaluate(CELL_LINES), window)


def rendered_markdown(path: Path) -> Path:
    """A markdown file as a viewer shows it (CommonMark, as MLflow's artifact view does)."""
    from markdown_it import MarkdownIt

    page = path.with_suffix(".md.html")
    body = MarkdownIt("commonmark").render(path.read_text())
    page.write_text(f"<!doctype html><meta charset='utf-8'><body>{body}</body>")
    return page


def long_named_rows() -> pd.DataFrame:
    """A problem whose names do not fit a cell: a plugin's long strategy name, a custom
    model's long name, noisy intervals."""
    model = "my_lab_custom_residual_network_with_a_long_descriptive_name_for_its_paper_v2"
    results = []
    for i, strategy in enumerate(
        [
            "our_plugins_forward_mode_strategy_with_batched_tangents_and_a_cache_v3",
            "jacfwd",
            "jacrev",
            "fd_central",
        ]
    ):
        results.append(
            make_result(
                model=model,
                strategy=strategy,
                strategy_kind="approximate" if strategy.startswith("fd") else "exact",
                strategy_mode="forward",
                time_median_s=1.09e-3 * (1 + i),
                time_ci_low_s=0.84e-3 * (1 + i),
                time_ci_high_s=1.23e-3 * (1 + i),
                timing_warning="Interquartile range is 40% of the median",
                job_id=f"long{i}".ljust(16, "0"),
                config_hash=f"long{i}",
            )
        )
    return normalise(pd.DataFrame([r.__dict__ for r in results]))[0]


def test_a_report_of_names_too_long_for_a_cell_fits_the_window(window, tmp_path: Path):
    write_report(long_named_rows(), tmp_path)
    seen = shown(window, tmp_path / "report.html", "report_long_names")
    assert seen.width <= WINDOW["width"]
    assert not seen.short_cells_on_more_lines()  # a median and its interval: one line
    top = seen.top_of("Recommendation")
    assert top is not None and top < WINDOW["height"]  # the answer's heading: first screen


@pytest.mark.slow  # a narrowed seed004 sweep (~20 s)
def test_a_seed004_sweeps_report_and_answer_fit_with_the_answer_first(window, cli):
    strategies = "strategy=jacfwd,functional,fd_forward_loop,fd_central,auto_eager"
    proc = cli("-m", "+experiment=seed004", strategies, *QUICK, *NO_MLFLOW, timeout=900)
    assert proc.returncode == 0, proc.stderr
    (summary,) = cli.summaries()
    report = shown(window, summary.parent / "report" / "report.html", "seed004_report")
    assert report.width <= WINDOW["width"]
    assert not report.short_cells_on_more_lines()
    top = report.top_of("Recommendation")
    assert top is not None and top < WINDOW["height"]
    answer = shown(window, rendered_markdown(summary.parent / "answer.md"), "seed004_answer")
    assert answer.width <= WINDOW["width"]
    top = answer.top_of("Answer: functional.jacobian")
    assert top is not None and top < WINDOW["height"] / 2  # the answer comes first


@pytest.mark.slow  # 30 problems' report (~30 s)
def test_a_thirty_problem_report_fits_the_window(window, tmp_path: Path):
    from test_many_problems import thirty_problems

    thirty_problems(tmp_path / "results")
    write_report(tmp_path / "results", tmp_path / "report")
    seen = shown(window, tmp_path / "report" / "report.html", "thirty_problems_report")
    assert seen.width <= WINDOW["width"]
    assert not seen.short_cells_on_more_lines()
    first, failed = seen.top_of("mlp (N="), seen.top_of("bad_input_")
    assert first is not None and first < WINDOW["height"] / 3  # answers first, not failures
    assert failed is not None and first < failed
    for image in window.query_selector_all("img"):  # every figure inside the page
        box = image.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WINDOW["width"]
