"""The Result: one flat, typed record per job (its parquet schema: ``jacbench.record.parquet``),
which everything downstream (parquet, MLflow, the printed table, reports) reads, never
recomputing it. Each column is documented in docs/columns.md."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from jacbench.core.enums import Named

__all__ = ["COLUMNS", "Result", "Round", "Status"]


class Status(Named):
    """How a job ended. ``skipped``: the strategy cannot apply here (a settled outcome);
    ``failed``: something went wrong (worth another try)."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class Round(Named):
    """Which measurement a row is: the job's own (``first``), or a second round's re-timing of
    a problem's contested pair interleaved in one job (``side_by_side``). Both are kept; every
    verdict compares rows of one round (``jacbench.report.problems.Moments``)."""

    FIRST = "first"
    SIDE_BY_SIDE = "side_by_side"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, kw_only=True)
class Result:
    """One job. Fields a job has not reached stay at their default (null when measured)."""

    # what was measured
    model: str
    strategy: str
    variant: str = ""  # the label every surface shows (jacbench.record.variant)
    dtype: str
    device: str
    strategy_kind: str = ""  # exact, approximate or negative_control
    strategy_mode: str = ""  # reverse, forward, numeric, analytic or auto
    chosen_strategy: str = ""  # what `auto` picked (empty for other strategies)
    decided_by: str = ""  # how auto picked it: calibrated, remembered or rule
    tier: str = ""  # auto: the tier timed (compiled once settled; eager where compiling fails)
    built: str = ""  # what the strategy's setup made, with its options (PrepInfo.built)
    wrt: str = ""  # input or params
    n_in: int | None = None  # N: the Jacobian has n_out rows and n_in columns
    n_out: int | None = None  # M
    batch: int = 1  # Jacobians computed per call (1 unless per-sample batches)
    seed: int = 0  # seeds the model's parameters and the point
    status: Status = Status.OK
    error_message: str = ""  # why, when not ok
    # timing
    time_median_s: float | None = None
    time_iqr_s: float | None = None
    n_timed: int | None = None
    # torch.utils.benchmark's warning where the IQR exceeds 10% of the median (noisy), else ""
    timing_warning: str = ""
    # what the median was measured from (jacbench.timing.measure): each timed block's per-call
    # time (wall, process CPU), their count, and the median's interval the rule compares
    n_blocks: int | None = None
    time_ci_low_s: float | None = None
    time_ci_high_s: float | None = None
    time_blocks_s: list[float] | None = None
    cpu_blocks_s: list[float] | None = None
    # the same for process CPU time per call, which a busy machine hardly moves (compare)
    cpu_median_s: float | None = None
    cpu_ci_low_s: float | None = None
    cpu_ci_high_s: float | None = None
    # the timed thread's own CPU time per call: what the rule compares on a busy machine
    thread_cpu_blocks_s: list[float] | None = None
    thread_cpu_median_s: float | None = None
    thread_cpu_ci_low_s: float | None = None
    thread_cpu_ci_high_s: float | None = None
    # the machine's load while timing: CPU / wall of the timed blocks (well below the threads
    # used = the job waited for a core) and the 1-minute load average
    cpu_wall_ratio: float | None = None
    load_avg_1m: float | None = None
    first_call_s: float | None = None  # prepare plus the first call
    threads: int = 1
    # glibc's thresholds held fixed while timing (jacbench.timing.allocator), or "system"
    allocator: str = ""
    measure_s: float | None = None  # wall time running the strategy (first call, timing, memory)
    # memory
    peak_mem_bytes: int | None = None
    memory_method: str = ""
    # sparse strategies: what the pattern made of the Jacobian
    n_colors: int | None = None  # passes per Jacobian (colours of the pattern)
    pattern_density: float | None = None  # nonzeros / (M * N) of the pattern used
    colors_lower_bound: int | None = None  # no colouring of the pattern has fewer colours
    pattern_source: str = ""  # declared, traced, probed, or dense (with why no pattern)
    # accuracy against the reference
    max_abs_err: float | None = None
    rel_err: float | None = None
    err_eps: float | None = None
    tolerance: float | None = None
    within_tol: bool | None = None
    # why within_tol is null although the error was measured (e.g. the references disagree)
    undecided_reason: str = ""
    # analytic (the model's formula), forward_float64 or reverse_float64 (exact AD), never in
    # the mode of the strategy under test where another method runs
    reference_method: str = ""
    # disagreement with the next independent exact method: above the tolerance, no verdict
    reference_uncertainty: float | None = None
    reference_sample: int | None = None  # entries judged on where sampled, else null
    ref_norm: float | None = None  # Frobenius norm of the reference Jacobian (its scale)
    out_norm: float | None = None  # 2-norm of f(x), in float64 (the output's scale)
    jacobian: list[float] | None = None  # row-major, float64; up to jacobian_max_entries
    # identity and provenance
    strategy_options: str = "{}"  # JSON
    model_options: str = "{}"  # JSON
    config_hash: str = ""
    mlflow_run_id: str = ""
    torch_version: str = ""
    device_name: str = ""
    git_commit: str = ""
    started_at: datetime = field(default_factory=_now)  # when the job started running
    job_id: str = field(default_factory=_new_id)
    round: Round = Round.FIRST
    pair_id: str = ""  # shared by the two rows of one re-timing (empty for the first round)
    # what made the row, beside config_hash and torch_version: a rerun reuses the row only
    # while all are unchanged (jacbench.run.resume); code_digest hashes the measuring code
    jacbench_version: str = ""
    code_digest: str = ""
    hostname: str = ""
    cpu_model: str = ""

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


COLUMNS: list[str] = [f.name for f in dataclasses.fields(Result)]
