"""Issue 42: one truth across surfaces. A preset's side-by-side re-timing is a job of its sweep
that records rows (never an edit of rows in memory), every surface derives from the rows, a
rerun reuses only rows whose config, jacbench, code, torch, device and machine are unchanged,
and an option shared by the swept strategies is given to each of them."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from helpers.cli import LAUNCH_FAST, NO_MLFLOW, NO_REPORT, QUICK, compose_job
from helpers.results import frame, make_result, timed_row
from helpers.surfaces import Surfaces, recommendations_md
from helpers.tracking import mlflow_runs
from jacbench.record.parquet import write_result
from jacbench.record.result import Round
from jacbench.run.identity import config_hash
from jacbench.run.pair import Pair, contestant
from jacbench.run.provenance import JACBENCH, measuring_files
from jacbench.run.resume import current_provenance, reusable
from jacbench.run.sweep.retiming import contested_pairs
from jacbench.timing.rule import MIN_BLOCKS

NARROW_SEED004 = "strategy=functional,jacfwd,jacrev"  # three: a best two and a third


def sweep_dirs(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("multirun/*/*/summary.parquet"))


# ---- the contested pair, re-timed as a job that records rows ----------------------------


def test_the_pair_retimed_is_the_recommendations_best_and_runner_up():
    """Issue 42: seed004_lm's contested pair was auto vs jacfwd_folded, yet jacfwd_folded and
    fd_central were re-timed (auto was left out as "its own rival")."""
    rows = frame(
        timed_row("auto", 0.060, 0.003, chosen_strategy="jacfwd_folded", within_tol=True),
        timed_row("jacfwd_folded", 0.0656, 0.003, within_tol=True),
        timed_row("fd_central", 0.070, 0.001, strategy_kind="approximate", within_tol=True),
    ).assign(job_num=[0, 1, 2])
    configs = [compose_job(f"strategy={name}") for name in ("auto", "jacfwd_folded", "fd_central")]
    (pair,) = contested_pairs(rows, configs)
    assert pair.labels == ("auto", "jacfwd_folded") and pair.jobs == (0, 1)
    assert [c["strategy"]["name"] for c in pair.configs] == ["auto", "jacfwd_folded"]
    assert pair.hashes() == [config_hash(configs[0]), config_hash(configs[1])]
    assert pd.Timestamp(pair.after) == rows["started_at"].max()
    assert Pair.from_json(pair.to_json()) == pair


def test_a_problem_without_a_runner_up_gets_no_side_by_side_job():
    rows = frame(timed_row("jacrev", 0.1, 0.01, within_tol=True)).assign(job_num=[0])
    assert contested_pairs(rows, [compose_job("strategy=jacrev")]) == []


def pair_of(*strategies: str, after: str = "2000-01-01T00:00:00+00:00") -> Pair:
    configs = [compose_job(f"strategy={s}", *LAUNCH_FAST) for s in strategies]
    return Pair(
        "mlp",
        strategies,
        (0, 1),
        (contestant(configs[0]), contestant(configs[1])),
        after,
    )


def test_a_side_by_side_job_records_a_full_row_for_each_with_every_interleaved_block():
    from jacbench.core.registry import load_registry
    from jacbench.run.side_by_side import run_pair

    pair = pair_of("jacrev", "jacfwd")
    first, second = run_pair(pair, load_registry())
    for result, cfg in zip((first, second), pair.contestant_configs(), strict=True):
        assert result.ok and result.round == Round.SIDE_BY_SIDE
        assert result.config_hash == config_hash(cfg)  # the same measurement, timed again
        assert result.n_blocks == 2 * MIN_BLOCKS and len(result.time_blocks_s) == 2 * MIN_BLOCKS
        assert len(result.cpu_blocks_s) == 2 * MIN_BLOCKS and result.cpu_wall_ratio > 0
        assert result.load_avg_1m >= 0 and result.within_tol  # judged, as every job is
        assert result.code_digest and result.hostname and result.cpu_model
    assert first.pair_id == second.pair_id != "" and first.started_at == second.started_at
    assert (first.strategy, second.strategy) == ("jacrev", "jacfwd")


def test_a_pair_whose_strategy_fails_records_why_in_both_rows():
    from jacbench.core.registry import load_registry
    from jacbench.run.side_by_side import run_pair

    pair = pair_of("jacrev", "jacfwd")
    broken = dict(pair.configs[1], strategy={"name": "jacfwd", "randomness": "nosuch"})
    first, second = run_pair(
        Pair("mlp", pair.labels, (0, 1), (pair.configs[0], broken), pair.after), load_registry()
    )
    assert {first.status, second.status} == {"failed"}
    assert first.round == second.round == Round.SIDE_BY_SIDE and first.pair_id == second.pair_id


# ---- reuse only what is still valid --------------------------------------------------------


def recorded(tmp_path: Path, cfg, **changes) -> Path:
    """A row of ``cfg`` in tmp_path/results, made by this process unless ``changes`` say."""
    here = current_provenance(cfg).columns()
    row = make_result(config_hash=config_hash(cfg), **{**here, **changes})
    folder = tmp_path / "results"
    folder.mkdir(exist_ok=True)
    return write_result(row, folder)


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"torch_version": "2.12.0"}, "torch 2.12.0 -> "),
        ({"jacbench_version": "0.0.1"}, "jacbench 0.0.1 -> "),
        ({"code_digest": "0123456789abcdef"}, "the measuring code"),
        ({"device_name": "NVIDIA H100"}, "the device NVIDIA H100 -> cpu"),
        ({"hostname": "elsewhere"}, "the host elsewhere -> "),
        ({"cpu_model": "another CPU"}, "the CPU another CPU -> "),
        (
            {"jacbench_version": "", "code_digest": "", "hostname": "", "cpu_model": ""},
            "measured by a jacbench that did not record",
        ),
    ],
)
def test_a_row_is_reused_only_while_what_made_it_is_unchanged(tmp_path, changed, said):
    """Issue 42: a rerun reused every row whatever had changed since (torch, the strategy's
    code, jacbench, the machine) and presented them as today's answer."""
    cfg = compose_job("strategy=jacrev", *LAUNCH_FAST)
    valid = recorded(tmp_path, cfg)
    found = reusable(cfg, tmp_path, force=False)
    assert found is not None and found.files == (valid,) and found.stale == ""
    valid.unlink()
    stale = recorded(tmp_path, cfg, **changed)
    assert reusable(cfg, tmp_path, force=False) is None  # measured again
    keep = compose_job("strategy=jacrev", *LAUNCH_FAST, "reuse_stale=true")
    found = reusable(keep, tmp_path, force=False)
    assert found is not None and found.files == (stale,) and said in found.stale


def test_the_measuring_code_includes_the_reference_the_judging_and_the_problem_builder():
    """Issue 45 moved them out of core into the benchmark package: a change in any of them may
    change a row's answer or verdict, so the code digest that decides a rerun must cover them."""
    files = {path.relative_to(JACBENCH).as_posix() for path in measuring_files("")}
    moved = {"benchmark/reference.py", "benchmark/judging.py", "benchmark/problems.py"}
    assert moved | {"core/problem.py", "core/numerics.py", "run/runner.py"} <= files


def test_a_job_that_runs_elsewhere_is_left_to_its_node_and_a_retiming_is_no_first_round(tmp_path):
    cfg = compose_job("strategy=jacrev", *LAUNCH_FAST)
    recorded(tmp_path, cfg)
    assert reusable(cfg, tmp_path, force=False) is not None
    assert reusable(cfg, tmp_path, force=False, elsewhere=True) is None  # a SLURM node asks
    for path in (tmp_path / "results").glob("*.parquet"):
        path.unlink()
    recorded(tmp_path, cfg, round="side_by_side", pair_id="p")
    assert reusable(cfg, tmp_path, force=False) is None


def test_a_side_by_side_job_reuses_only_a_retiming_of_its_pair_newer_than_its_first_round(tmp_path):
    pair = pair_of("jacrev", "jacfwd", after="2026-01-02T03:04:05+00:00")
    cfgs = pair.contestant_configs()
    when = pd.Timestamp(pair.after).to_pydatetime()
    made = []
    for cfg, pair_id in ((cfgs[0], "p1"), (cfgs[1], "p1"), (cfgs[0], "p2")):
        later = {"started_at": when + timedelta(minutes=1), "job_id": f"{pair_id}{len(made)}"}
        made.append(recorded(tmp_path, cfg, round="side_by_side", pair_id=pair_id, **later))
    job = compose_job("strategy=jacrev", *LAUNCH_FAST, "round=side_by_side")
    found = reusable(job, tmp_path, force=False, pair=pair)
    assert found is not None and found.files == (made[0], made[1])  # p2 lacks its partner
    older = Pair(pair.problem, pair.labels, pair.jobs, pair.configs, "2026-01-02T03:06:00+00:00")
    assert reusable(job, tmp_path, force=False, pair=older) is None  # first round redone


def test_a_rerun_measures_again_the_strategy_whose_code_changed_and_reuses_the_rest(
    cli, tmp_path, monkeypatch
):
    """Done when (issue 42): a plugin strategy installed from a tmp folder; its source edited
    between two runs of the same sweep."""
    from jacbench.core.registry import load_registry

    plugin = tmp_path / "plugin"
    (plugin / "jacbench_tmp_plugin-0.1.dist-info").mkdir(parents=True)
    (plugin / "jacbench_tmp_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jacbench-tmp-plugin\nVersion: 0.1\n"
    )
    (plugin / "jacbench_tmp_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[jacbench.strategies]\ntmp_rows = jacbench_tmp_plugin:tmp_rows\n"
    )
    source = plugin / "jacbench_tmp_plugin.py"
    source.write_text(
        textwrap.dedent(
            """
            import torch
            from jacbench import Kind, Mode, strategy

            @strategy(Kind.EXACT, Mode.REVERSE)
            def tmp_rows(problem, opts):
                return torch.func.jacrev(problem.f)
            """
        )
    )
    monkeypatch.syspath_prepend(str(plugin))
    load_registry.cache_clear()
    try:
        sweep = ["-m", "strategy=tmp_rows,jacrev", *QUICK, *NO_MLFLOW, *NO_REPORT]
        first = cli(*sweep)
        assert first.returncode == 0, first.stderr
        again = cli(*sweep)
        assert "2/2 jobs recorded: 2 ok" in again.stdout and "2 already done" in again.stdout
        source.write_text(source.read_text() + "\n# tuned\n")
        edited = cli(*sweep)
    finally:
        sys.modules.pop("jacbench_tmp_plugin", None)
        load_registry.cache_clear()
    assert edited.returncode == 0, edited.stderr
    assert "job 1: already done" in edited.stdout and "job 0: already done" not in edited.stdout
    assert "1 already done (resumed)" in edited.stdout
    rows = cli.results()
    assert sorted(rows["strategy"]) == ["jacrev", "tmp_rows", "tmp_rows"]
    assert rows.groupby("strategy")["code_digest"].nunique()["tmp_rows"] == 2


def test_rows_of_an_earlier_jacbench_are_measured_again_unless_kept_stale(launch, tmp_path):
    cfg = compose_job("strategy=jacrev", "model=seed003_cat_poly", *LAUNCH_FAST)
    old = make_result(strategy="jacrev", model="seed003_cat_poly", config_hash=config_hash(cfg))
    old = {k: v for k, v in old.__dict__.items() if k not in ("code_digest", "hostname")}
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jacbench.record.parquet import result_filename

    (tmp_path / "results").mkdir()
    pq.write_table(
        pa.Table.from_pylist([old]),
        tmp_path / "results" / result_filename(make_result(config_hash=config_hash(cfg))),
    )
    code, _, printed = launch("-m", "strategy=jacrev", "model=seed003_cat_poly", "report=false")
    assert code == 0 and "0 already done" in printed, printed
    code, _, printed = launch(
        "-m", "strategy=jacrev", "model=seed003_cat_poly", "report=false", "reuse_stale=true"
    )
    assert code == 0 and "1 already done (resumed)" in printed, printed  # the newest: valid
    assert "STALE" not in printed


# ---- shared options ----------------------------------------------------------------------


def test_an_option_of_the_swept_strategies_is_given_to_each_of_them(launch, tmp_path):
    """Issue 42: this sweep failed with "unknown key 'strategy.output'; valid keys of
    strategy: chunk_size" (checked against the default strategy, not the swept ones)."""
    sweep = ["model=burgers", "model.n=64", "strategy=sparse_jacfwd,sparse_jacrev"]
    code, lines, printed = launch("-m", *sweep, "strategy.output=csr", "report=false")
    assert code == 0 and not lines, printed
    rows = pd.read_parquet(sweep_dirs(tmp_path)[-1] / "summary.parquet")
    assert set(rows["status"]) == {"ok"} and len(rows) == 2
    assert {json.loads(o)["output"] for o in rows["strategy_options"]} == {"csr"}


def test_a_swept_strategy_without_the_option_is_one_failed_row_and_a_typo_is_refused(
    launch, tmp_path
):
    sweep = ["model=burgers", "model.n=64", "strategy=sparse_jacrev,jacrev", "report=false"]
    code, _, printed = launch("-m", *sweep, "strategy.output=csr")
    assert code == 1, printed
    rows = pd.read_parquet(sweep_dirs(tmp_path)[-1] / "summary.parquet").set_index("strategy")
    assert rows.loc["sparse_jacrev", "status"] == "ok"
    assert rows.loc["jacrev", "status"] == "failed"
    assert rows.loc["jacrev", "error_message"] == (
        "strategy 'jacrev' has no option(s) output; valid options: chunk_size"
    )
    code, lines, _ = launch("-m", *sweep, "strategy.outptu=csr")
    assert code == 1 and lines == [
        "jacbench: unknown key 'strategy.outptu': no swept strategy has it; their options: "
        "jacrev: chunk_size; sparse_jacrev: pattern, detect_points, output, compile, passes"
    ], lines
    assert len(sweep_dirs(tmp_path)) == 1  # refused before any job
    code, lines, _ = launch("strategy=jacrev", "strategy.output=csr")  # a single run: as before
    assert code == 1 and lines == [
        "jacbench: unknown key 'strategy.output'; valid keys of strategy: chunk_size"
    ]


def test_round_is_the_sweeps_own(launch):
    code, lines, _ = launch("strategy=jacrev", "round=side_by_side")
    assert code == 1 and lines[0].startswith("jacbench: round=side_by_side: a sweep makes")
    code, lines, _ = launch("-m", "strategy=jacrev", "round=side_by_side")
    assert code == 1 and lines[0].startswith("jacbench: round=side_by_side: a sweep makes")


# ---- Done when: every surface says the same ----------------------------------------------


@pytest.mark.slow  # two narrowed seed004 sweeps with their reports and MLflow runs
def test_a_preset_says_the_same_everywhere_and_its_retiming_is_rows(cli, tmp_path):
    proc = cli("+experiment=seed004", NARROW_SEED004, *QUICK, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (sweep_dir,) = sweep_dirs(tmp_path)
    surfaces = Surfaces(proc.stdout, sweep_dir, cli.tracking_uri)
    rows = surfaces.rows
    retimed = rows[rows["round"] == "side_by_side"]
    assert len(retimed) == 4 and retimed["pair_id"].nunique() == 2  # one pair per problem
    assert (retimed["n_blocks"] == 2 * MIN_BLOCKS).all() and retimed["status"].eq("ok").all()
    assert sorted(retimed["job_num"].unique()) == [6, 7]
    first = rows[rows["round"] == "first"]
    assert len(first) == 6 and first["job_num"].tolist() == list(range(6))
    _, children = mlflow_runs(cli.tracking_uri)
    assert len(children) == 10  # every row a child run, the re-timings too
    assert sum(" side by side " in c.info.run_name for c in children) == 4
    surfaces.assert_one_truth(tmp_path / "again")
    answer = " ".join((sweep_dir / "answer.md").read_text().split())  # prose is wrapped
    assert answer.count("timed side by side (12 interleaved blocks each, job ") == 2

    again = cli("+experiment=seed004", NARROW_SEED004, *QUICK, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "8/8 jobs recorded (10 rows)" in again.stdout and "10 already done" in again.stdout
    (_, second) = sweep_dirs(tmp_path)
    Surfaces(again.stdout, second, cli.tracking_uri).assert_one_truth(tmp_path / "again2")
    said = [
        recommendations_md((d / "report" / "report.md").read_text()) for d in (sweep_dir, second)
    ]
    assert said[0] == said[1]
    # the reused note dates the re-timing by its own rows (issue 42: "measured 16:14" for
    # rows re-timed at 16:26)
    newest = f"{retimed['started_at'].max():%Y-%m-%d %H:%M}"
    prose = " ".join((second / "answer.md").read_text().split())  # wrapped
    note = prose[prose.index("Reused ") :].split(" UTC", 1)[0]
    assert note.startswith("Reused 10 row(s)") and note.endswith(newest)


@pytest.mark.slow  # an 8-job sweep (four problems) with its report and MLflow runs
def test_a_plain_sweep_says_the_same_everywhere(cli, tmp_path):
    grid = ["strategy=jacrev,fd_central", "dtype=float32,float64"]
    proc = cli("-m", *grid, "model=mlp,seed003_cat_poly", *QUICK, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "8/8 jobs recorded: 8 ok" in proc.stdout
    (sweep_dir,) = sweep_dirs(tmp_path)
    surfaces = Surfaces(proc.stdout, sweep_dir, cli.tracking_uri)
    assert set(surfaces.rows["round"]) == {"first"}  # a plain sweep re-times nothing
    surfaces.assert_one_truth(tmp_path / "again")


@pytest.mark.slow  # a joblib sweep: a subprocess and its workers
def test_a_joblib_preset_retimes_in_a_worker_and_says_the_same_everywhere(cli, tmp_path):
    """Issue 42: the re-timing ran in the launching process (under SLURM: not on the nodes
    that measured the jobs); now it is a job the launcher runs where its jobs run."""
    proc = cli(
        "+experiment=seed004",
        NARROW_SEED004,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        *QUICK,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    (sweep_dir,) = sweep_dirs(tmp_path)
    (state,) = (sweep_dir / ".jacbench").iterdir()
    sweep_pid = json.loads((state / "sweep.json").read_text())["sweep_pid"]
    pairs = sorted(int(p.stem) for p in (state / "pairs").glob("*.json"))
    assert pairs == [6, 7]  # after the six jobs of three strategies in two dtypes
    for num in pairs:  # measured by a joblib worker, not the sweep's process
        assert json.loads((state / "jobs" / f"{num}.json").read_text())["pid"] != sweep_pid
    assert os.getpid() != sweep_pid
    Surfaces(proc.stdout, sweep_dir, cli.tracking_uri).assert_one_truth(tmp_path / "again")


# ---- a verdict compares rows of one moment -------------------------------------------------


def retimed_pair(*rows: dict, at: pd.Timestamp) -> list[dict]:
    return [dict(r, round="side_by_side", pair_id="p1", started_at=at) for r in rows]


def test_a_pair_retimed_at_a_slower_moment_keeps_its_places_and_its_own_order():
    """The map of 2026-11-26 re-timed its pairs at the end of the sweep's process, 15-25%
    slower than the first round; ranked among the first round's times, the re-timed best two
    fell behind a third never timed again (and auto lost to it by 1.24, where side by side it
    was 1.01)."""
    from jacbench.report.analysis import recommend

    first = [
        timed_row("jacfwd", 1.00, 0.01, within_tol=True),
        timed_row("jacrev", 1.05, 0.01, within_tol=True),
        timed_row("functional", 1.10, 0.01, within_tol=True),
    ]
    later = pd.Timestamp(frame(*first)["started_at"].max()) + pd.Timedelta(seconds=5)
    again = retimed_pair(
        timed_row("jacfwd", 1.30, 0.01, within_tol=True),
        timed_row("jacrev", 1.25, 0.01, within_tol=True),
        at=later,
    )
    rec = recommend("mlp", frame(*first, *again))
    assert (rec.best, rec.runner_up) == ("jacrev", "jacfwd")  # the pair's order, not functional
    assert rec.runner_up_slower == pytest.approx(1.30 / 1.25, rel=0.01)
    assert rec.best_time == pytest.approx(1.25e-3, rel=0.01)  # the pair's own figure


def test_a_first_round_newer_than_the_pair_replaces_it():
    from jacbench.report.analysis import recommend

    first = [
        timed_row("jacfwd", 1.00, 0.01, within_tol=True),
        timed_row("jacrev", 1.05, 0.01, within_tol=True),
    ]
    start = pd.Timestamp(frame(*first)["started_at"].max())
    again = retimed_pair(
        timed_row("jacfwd", 1.30, 0.01, within_tol=True),
        timed_row("jacrev", 1.25, 0.01, within_tol=True),
        at=start + pd.Timedelta(seconds=5),
    )
    rerun = dict(first[0], started_at=start + pd.Timedelta(seconds=9))  # jacfwd measured again
    rec = recommend("mlp", frame(*first, *again, rerun))
    assert rec.best == "jacfwd" and rec.best_time == pytest.approx(1.0e-3, rel=0.01)
