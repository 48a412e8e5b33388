"""How a job is timed: the ``timing`` config group's schema, bounded so that a bad setting fails
instead of hanging the job."""

from __future__ import annotations

from dataclasses import dataclass

from jacbench.core.errors import ConfigError

MAX_MIN_RUN_TIME = 3600.0  # seconds
MAX_WARMUP = 10_000  # calls
MAX_THREADS = 1024


@dataclass
class TimingConfig:
    min_run_time: float = 0.2  # seconds of timed calls (torch.utils.benchmark.blocked_autorange)
    warmup: int = 1  # untimed calls after the first call, before timing
    threads: int = 1  # torch intra-op threads for the job
    memory: bool = True  # measure peak memory of one extra call
    time: bool = True  # false (timing=none): judged once, nothing timed (n_timed=0)

    def __post_init__(self) -> None:
        if not 0 < self.min_run_time <= MAX_MIN_RUN_TIME:
            raise ConfigError(
                f"timing.min_run_time must be > 0 and <= {MAX_MIN_RUN_TIME:g} seconds, "
                f"got {self.min_run_time}"
            )
        if not 0 <= self.warmup <= MAX_WARMUP:
            raise ConfigError(
                f"timing.warmup must be >= 0 and <= {MAX_WARMUP} calls, got {self.warmup}"
            )
        if not 1 <= self.threads <= MAX_THREADS:
            raise ConfigError(
                f"timing.threads must be >= 1 and <= {MAX_THREADS}, got {self.threads}"
            )
