"""``python -m jacbench.report --history DIR ...`` (issue 44): each strategy's time across
folders of different torch or jacbench versions, settled changes named by the rule."""

from __future__ import annotations

import hashlib

from helpers.results import make_result
from jacbench.record.parquet import write_result
from jacbench.report.__main__ import main as report_main
from jacbench.report.history import changes, read_history
from jacbench.timing.rule import Order


def record(folder, torch_version: str, times: dict[str, float]) -> None:
    for strategy, ms in times.items():
        key = f"{folder.name}-{strategy}"
        write_result(
            make_result(
                strategy=strategy,
                strategy_mode="forward" if strategy == "jacfwd" else "reverse",
                time_median_s=ms * 1e-3,
                torch_version=torch_version,
                config_hash=strategy,
                job_id=hashlib.md5(key.encode()).hexdigest()[:16],
            ),
            folder,
        )


def three_versions(tmp_path):
    folders = [tmp_path / name for name in ("t2.1", "t2.2", "t2.3")]
    # jacfwd slows 3.5 -> 6 ms (pytorch #99573), then stays; jacrev moves within its noise
    record(folders[0], "2.1.0", {"jacfwd": 3.5, "jacrev": 1.0})
    record(folders[1], "2.2.0", {"jacfwd": 6.0, "jacrev": 1.01})
    record(folders[2], "2.3.0", {"jacfwd": 6.05, "jacrev": 0.99})
    return folders


def test_a_settled_slowdown_is_named_and_noise_is_not(tmp_path):
    versions, rows = read_history(three_versions(tmp_path))
    assert [v.label for v in versions] == [
        "1: t2.1, torch 2.1.0, device cpu",
        "2: t2.2, torch 2.2.0, device cpu",
        "3: t2.3, torch 2.3.0, device cpu",
    ]
    found = {(c.label, c.before, c.after): c for c in changes(rows)}
    assert found[("jacfwd", 0, 1)].order == Order.SLOWER
    assert found[("jacfwd", 0, 1)].ratio == 6.0 / 3.5
    assert found[("jacfwd", 1, 2)].order == Order.TIED
    assert {found[("jacrev", a, b)].order for a, b in ((0, 1), (1, 2))} == {Order.TIED}


def test_the_history_command_prints_the_changes_and_writes_its_page(tmp_path, capsys):
    folders = [str(f) for f in three_versions(tmp_path)]
    assert report_main(["--history", *folders, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 strategy-problem changes between 3 versions: 1 settled slower")
    assert "jacfwd 1: t2.1, torch 2.1.0" in out and "slower (1.71x" in out
    page = (tmp_path / "out" / "history.html").read_text()
    assert "data:image/png;base64," in page and "settled slower" in page


def test_one_folder_is_no_history(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        report_main(["--history", str(tmp_path)])
    assert "--history needs two folders or more" in capsys.readouterr().err


def test_the_figure_rings_only_the_settled_change(tmp_path):
    from jacbench.report.history import RING, history_figure

    versions, rows = read_history(three_versions(tmp_path))
    settled = [c for c in changes(rows) if c.settled]
    fig = history_figure(rows, versions, settled)
    rings = [c for ax in fig.axes for c in ax.collections if c.get_label() == RING]
    (ring,) = rings
    assert [tuple(p) for p in ring.get_offsets()] == [(2.0, 6.0)]  # jacfwd at version 2


def two_problems(tmp_path):
    """Two problems across two versions: the first with jacfwd and jacrev, the second with
    jacrev alone (a panel's first line is not the same strategy in every panel)."""
    folders = [tmp_path / name for name in ("v1", "v2")]
    for folder, torch_version, scale in zip(folders, ("2.1.0", "2.2.0"), (1.0, 1.5), strict=True):
        record(folder, torch_version, {"jacfwd": 3.5 * scale, "jacrev": 1.0 * scale})
        write_result(
            make_result(
                model="tanh",
                strategy="jacrev",
                time_median_s=2e-3 * scale,
                torch_version=torch_version,
                config_hash="tanh-jacrev",
                job_id=hashlib.md5(f"{folder.name}-tanh".encode()).hexdigest()[:16],
            ),
            folder,
        )
    return folders


def line_colours(fig) -> dict[str, set[str]]:
    """Each strategy's line colours over every panel, by the label it was drawn with."""
    from matplotlib.colors import to_hex

    found: dict[str, set[str]] = {}
    for ax in fig.axes:
        for bars in ax.containers:  # an errorbar per strategy: its data line's colour
            found.setdefault(bars.get_label(), set()).add(to_hex(bars.lines[0].get_color()))
    return found


def test_a_strategy_has_one_colour_in_every_panel_and_in_the_legend(tmp_path):
    from matplotlib.colors import to_hex

    from jacbench.report.history import history_figure

    versions, rows = read_history(two_problems(tmp_path))
    fig = history_figure(rows, versions, [c for c in changes(rows) if c.settled])
    assert len(fig.axes) == 2
    colours = line_colours(fig)
    assert set(colours) == {"jacfwd", "jacrev"}
    assert all(len(c) == 1 for c in colours.values()), colours  # one colour across panels
    assert colours["jacfwd"] != colours["jacrev"]
    (legend,) = fig.legends
    shown = {
        text.get_text(): to_hex(handle.get_color())
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        if text.get_text() in colours
    }
    assert shown == {label: next(iter(c)) for label, c in colours.items()}


def test_the_history_page_has_a_table_of_the_figures_numbers(tmp_path):
    folders = [str(f) for f in two_problems(tmp_path)]
    assert report_main(["--history", *folders, "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "history.md").read_text()
    numbers = text.split("## Numbers", 1)[1]
    assert "| problem | strategy | version 1 | version 2 | change |" in numbers
    jacfwd = next(line for line in numbers.splitlines() if "| jacfwd |" in line)
    assert "3.50 ms" in jacfwd and "5.25 ms" in jacfwd and "1 -> 2: slower 1.5x" in jacfwd
    tanh = next(line for line in numbers.splitlines() if line.startswith("| tanh"))
    assert "2.00 ms" in tanh and "3.00 ms" in tanh
    page = (tmp_path / "out" / "history.html").read_text()
    assert page.index("data:image/png") < page.index("<th>version 1</th>")  # below the figure
