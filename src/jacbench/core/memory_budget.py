"""Will the job's Jacobians fit in memory? Estimated from the problem's shape before the
reference or the strategy allocates anything, so that a job too large for the machine ends
in one line at once instead of swapping for minutes and then losing its row.

The whole Jacobian is the job's answer, so no chunking can shrink it: the strategy's answer
(in the job's dtype, on its device) and, on the CPU, the float64 reference, the second exact
method that bounds the reference's uncertainty, and the comparison's float64 temporaries.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from jacbench.core.errors import ConfigError, MemoryBudget

# float64 matrices of the Jacobian's size held at once on the CPU: the reference, the method
# that checks it, and the comparison's answer-in-float64 and difference.
FLOAT64_COPIES = 4
GIB = 2.0**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a job needs for its Jacobians, where they live."""

    entries: int  # numbers in the Jacobian (all points)
    answer_bytes: int  # the strategy's answer, on the job's device
    reference_bytes: int  # the float64 reference and comparison, on the CPU

    def cpu_bytes(self, device: torch.device) -> int:
        return self.reference_bytes + (self.answer_bytes if device.type == "cpu" else 0)


# Above this many entries the dense float64 reference (and its check) is not built: the
# verdict comes from a sampled reference (jacbench.benchmark.reference.sampled_reference).
DENSE_REFERENCE_MAX = 1 << 25  # 33.5 million entries: 256 MiB a float64 copy


def sampled(n_out: int, n_in: int, batch: int) -> bool:
    """Whether the job's reference is sampled rather than dense."""
    return n_out * n_in * batch > DENSE_REFERENCE_MAX


def estimate(n_out: int, n_in: int, batch: int, dtype: torch.dtype) -> MemoryEstimate:
    entries = n_out * n_in * batch
    itemsize = torch.empty((), dtype=dtype).element_size()
    return MemoryEstimate(entries, entries * itemsize, entries * 8 * FLOAT64_COPIES)


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _cgroup_room() -> int | None:
    """What the container's memory limit leaves (cgroup v2, else v1)."""
    for limit, usage in [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ]:
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:
            return max(0, cap - used)
    return None


def _address_space_room() -> int | None:
    """What ``ulimit -v`` leaves this process."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        status = Path("/proc/self/status").read_text()
        size = next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmSize" in line)
    except (OSError, StopIteration, ValueError):
        return None
    return max(0, soft - size)


def available_cpu_memory() -> int | None:
    """Bytes this process can still allocate: the least of the machine's available memory,
    the container's limit and the address-space limit (None where none can be read)."""
    known = [v for v in (_meminfo_available(), _cgroup_room(), _address_space_room()) if v]
    return min(known) if known else None


def _gib(n: float) -> str:
    return f"{n / GIB:.3g} GiB"


def check_input_fits(name: str, shape: tuple[int, ...], batch: int, dtype: torch.dtype) -> None:
    """The model's input (drawn in float64, then cast) must fit before it is drawn: torch's
    own refusal is a raw ``can't allocate memory ... 80000000000 bytes``."""
    numel = math.prod(shape) * batch
    need = numel * (8 + dtype.itemsize)
    room = available_cpu_memory()
    if room is not None and need > room:
        raise ConfigError(
            f"not run: model {name!r}: an input of shape {list(shape)}"
            + (f" x {batch} points" if batch > 1 else "")
            + f" needs about {_gib(need)} of memory before any Jacobian, but {_gib(room)} "
            "are available; use a smaller input_shape or batch"
        )


def check_fits(
    n_out: int,
    n_in: int,
    batch: int,
    dtype: torch.dtype,
    device: torch.device,
    room: int | None = None,
    dense_answer: bool = True,
) -> None:
    """Raise one clear ConfigError when the job's Jacobians cannot fit in memory (``room``:
    the CPU memory available, default what this process can still allocate). A Jacobian too
    large for a dense float64 reference (``sampled``) is judged on a sample instead; a sparse
    answer (``dense_answer`` false) holds only its nonzeros."""
    need = estimate(n_out, n_in, batch, dtype)
    if sampled(n_out, n_in, batch):  # no dense reference; a dense answer and its working copy
        need = dataclasses.replace(need, reference_bytes=need.answer_bytes if dense_answer else 0)
    if not dense_answer:
        need = dataclasses.replace(need, answer_bytes=0)
    shape = f"{n_out} x {n_in}" + (f" x {batch} points" if batch > 1 else "")
    advice = (
        "use a smaller model or input_shape (fewer parameters with wrt=params): the whole "
        "Jacobian and its float64 reference must fit, chunk_size options bound only what is "
        "computed on the way"
    )
    room = available_cpu_memory() if room is None else room
    if room is not None and need.cpu_bytes(device) > room:
        raise ConfigError(
            f"not run: the {shape} Jacobian needs about {_gib(need.cpu_bytes(device))} of "
            f"memory ({_gib(need.answer_bytes)} in {str(dtype).removeprefix('torch.')}, "
            f"{_gib(need.reference_bytes)} for the float64 reference and its check, or the "
            f"answer's working copy where the reference is sampled) but "
            f"{_gib(room)} are available; {advice}"
        )
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if need.answer_bytes > free:
            raise ConfigError(
                f"not run: the {shape} Jacobian needs about {_gib(need.answer_bytes)} on "
                f"{device} but {_gib(free)} are free there; {advice}"
            )


# A dense strategy holds the answer and, on its way, a working copy as large (the basis of
# its passes, or the batched passes themselves) at once.
DENSE_COPIES = 2


def check_answer_fits(n_out: int, n_in: int, dtype: torch.dtype, device: torch.device) -> None:
    """The library's budget: a dense (M, N) Jacobian that cannot fit where it is computed is
    refused before anything is allocated (``MemoryBudget``), naming its size and the sparse
    way, instead of torch's raw allocator error or the OOM killer."""
    need = DENSE_COPIES * n_out * n_in * dtype.itemsize
    if device.type == "cuda":
        room: int | None = torch.cuda.mem_get_info(device)[0]
    else:
        room = available_cpu_memory()
    if room is not None and need > room:
        raise MemoryBudget(
            f"a dense {n_out} x {n_in} Jacobian in {str(dtype).removeprefix('torch.')} needs "
            f"about {_gib(need)} (the answer and a working copy) but {_gib(room)} are "
            f"available on {device}: use the default strategy 'auto' (it finds a sparsity "
            "pattern and returns CSR) or a sparse one: prepare(f, x, 'sparse_jacrev', "
            "output='csr')"
        )
