"""Grouping rows into problems and strategy variants, tolerant of older or partial rows."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from jacbench.core.enums import Kind
from jacbench.record import variant
from jacbench.record.parquet import SCHEMA
from jacbench.record.result import Round, Status
from jacbench.timing.rule import busy, ranking_seconds

PROBLEM_KEYS = ["model", "model_options", "wrt", "n_in", "n_out", "batch", "dtype", "device"]
DEFAULT_STRATEGY = "functional"  # PyTorch's default: torch.autograd.functional.jacobian


def normalise(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Add the columns an older or partial result set lacks (empty), and say which."""
    partial = set(rows.attrs.get("missing_columns", []))
    rows = _numpy_backed(rows)
    absent = [name for name in SCHEMA.names if name not in rows.columns]
    for name in absent:
        rows[name] = pd.NA
    missing = sorted(partial | set(absent))
    defaults = {
        "wrt": "input",
        "batch": 1,
        "model_options": "{}",
        "strategy_options": "{}",
        "strategy_kind": Kind.EXACT,
        "strategy_mode": "",
        "error_message": "",
        "timing_warning": "",
        "undecided_reason": "",
    }
    for name, value in defaults.items():
        rows[name] = rows[name].astype(object).where(rows[name].notna(), value)
    for name in ("n_in", "n_out", "batch"):
        rows[name] = pd.to_numeric(rows[name], errors="coerce").astype("Int64")
    for name in ("time_median_s", "time_iqr_s", "rel_err", "err_eps"):
        rows[name] = pd.to_numeric(rows[name], errors="coerce").astype(float)
    rows["within_tol"] = rows["within_tol"].astype("boolean")
    rows["label"] = labels(rows)
    return rows, missing


def labels(rows: pd.DataFrame) -> list[str]:
    """Each row's variant label (``jacbench.record.variant``): the recorded one, else (an
    earlier jacbench's row) its strategy with the options that differ among its rows here."""
    recorded = rows["variant"].fillna("").astype(str) if "variant" in rows else [""] * len(rows)
    parsed = [parse_options(o) for o in rows["strategy_options"]]
    varying: dict[str, set[str]] = {str(s): set() for s in rows["strategy"]}
    for strategy in varying:
        mine = [o for s, o in zip(rows["strategy"], parsed, strict=True) if str(s) == strategy]
        keys = {k for o in mine for k in o}
        varying[strategy] = {k for k in keys if len({json.dumps(o.get(k)) for o in mine}) > 1}
    return [
        given or variant.label(str(s), {k: options.get(k) for k in sorted(varying[str(s)])})
        for s, options, given in zip(rows["strategy"], parsed, recorded, strict=True)
    ]


def parse_options(text: object) -> dict:
    """A row's options (JSON text) as a dict; {} where unreadable."""
    try:
        values = json.loads(str(text or "{}"))
    except (TypeError, ValueError):
        return {}
    return values if isinstance(values, dict) else {}


def _numpy_backed(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy whose Arrow-backed columns (as parquet reads them) are NumPy-backed: verdicts
    take rows per problem and variant, and a take costs far more on Arrow arrays."""
    columns = {}
    for name in rows.columns:
        column, dtype = rows[name], rows[name].dtype
        if isinstance(dtype, pd.ArrowDtype):
            kind = dtype.pyarrow_dtype
            if pa.types.is_floating(kind):
                column = column.astype("float64")
            elif pa.types.is_integer(kind):
                column = column.astype("Int64")
            elif pa.types.is_boolean(kind):
                column = column.astype("boolean")
            else:
                column = column.astype(object)
        columns[name] = column
    converted = pd.DataFrame(columns, index=rows.index)  # one block build, not column by column
    converted.attrs = dict(rows.attrs)
    return converted


def _options_text(options: str, skip: tuple[str, ...] = ()) -> str:
    values = sorted(parse_options(options).items())
    return ",".join(f"{k}={v}" for k, v in values if v is not None and k not in skip)


def problem_title(key: tuple, variants_of_model: int) -> str:
    model, model_options, wrt, n_in, n_out, batch, dtype, device = key
    if pd.isna(n_in) or pd.isna(n_out):  # the job failed before its problem was built
        return f"{model} {dtype} {device} (failed before setup: shape unknown)"
    title = f"{model} (N={n_in}, M={n_out}"
    title += f", batch {batch}" if batch and int(batch) > 1 else ""
    title += f", wrt {wrt}" if wrt == "params" else ""
    title += f") {dtype} {device}"
    if variants_of_model > 1:  # several configurations of one model: say which
        skip = ("_target_", "name", "wrt", "batch", "n_in", "n_out")  # N and M are in the title
        title += " " + _options_text(model_options, skip=skip)
    return title


def problems(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, all rows of the problem) for each problem, in a stable order; jobs that failed
    before setup (no shape recorded) form problems of their own, so their failures show."""
    keyed = rows.assign(**{k: rows[k].astype(str) for k in PROBLEM_KEYS})
    built = keyed[rows["n_in"].notna()]  # failed-before-setup rows carry no model options
    per_model = built.groupby("model")["model_options"].nunique()
    return [
        (problem_title(key, int(per_model.get(key[0], 1))), rows.loc[group.index])
        for key, group in keyed.groupby(PROBLEM_KEYS, sort=True, dropna=False)
    ]


def latest_ok(rows: pd.DataFrame) -> pd.DataFrame:
    """The newest ok row of each strategy variant (re-runs replace older measurements)."""
    ok = rows[rows["status"] == Status.OK]
    return ok.sort_values("started_at").groupby("label").tail(1)


def good(rows: pd.DataFrame) -> pd.DataFrame:
    """Usable answers: the newest ok row per variant, within tolerance, no negative control."""
    ok = latest_ok(rows)
    mask = ok["within_tol"].fillna(False).astype(bool)
    return ok[mask & (ok["strategy_kind"] != "negative_control")]


def _standing_pairs(first: pd.DataFrame, again: pd.DataFrame) -> list[pd.DataFrame]:
    """The side-by-side pairs whose two rows are each label's newest re-timing and no older
    than the label's newest first-round row (a later first round replaces a pair)."""
    newest_first = dict(zip(first["label"], first["started_at"], strict=True))
    pairs = []
    for _, two in again.groupby("pair_id", sort=False):
        if len(two) != 2:
            continue
        when = two["started_at"].min()
        if all(newest_first.get(label, when) <= when for label in two["label"]):
            pairs.append(two)
    return pairs


@dataclass(frozen=True)
class Moments:
    """One problem's rows read so that every verdict compares rows of one moment (a re-timing
    may run slower than the first round): the first round's rows rank every variant, and a
    pair timed side by side (``_standing_pairs``) takes its two places in that order."""

    first: pd.DataFrame  # ``pick``'s first-round rows
    newest: pd.DataFrame  # ``pick``'s rows of any round (for a variant without a first round)
    pairs: tuple[pd.DataFrame, ...]

    def ranked(self) -> pd.DataFrame:
        """The first round's rows fastest first (untimed last; by CPU time where one waited for
        its core, ``rule.ranking_seconds``), each pair's two places filled with its rows."""
        ordered = _fastest_first(self.first)
        if not self.pairs:
            return ordered
        pool = pd.concat([ordered, *self.pairs], ignore_index=True)
        labels, at = list(ordered["label"]), list(range(len(ordered)))
        start = len(ordered)
        for two in self.pairs:
            if set(two["label"]) <= set(labels):
                slots = sorted(labels.index(label) for label in two["label"])
                faster = _fastest_first(two.reset_index(drop=True)).index.to_numpy()
                for slot, k in zip(slots, faster, strict=True):
                    labels[slot], at[slot] = two["label"].iloc[k], start + int(k)
            start += len(two)
        return pool.iloc[at]

    def pair(self, a: str, b: str) -> tuple[pd.Series, pd.Series]:
        """The rows of variants ``a`` and ``b`` to compare with each other: their re-timing
        where they were timed side by side, else each one's first-round row."""
        for two in self.pairs:
            if set(two["label"]) == {a, b}:
                return _row(two, a), _row(two, b)
        return self._own(a), self._own(b)

    def _own(self, label: str) -> pd.Series:
        found = self.first[self.first["label"] == label]
        return found.iloc[0] if len(found) else _row(self.newest, label)


def _fastest_first(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` by ``rule.ranking_seconds``: wall time, or CPU time where any waited for a core."""
    if rows.empty:
        return rows
    records = rows.to_dict("records")
    loaded = busy(*records)
    seconds = [ranking_seconds(r, loaded) for r in records]
    key = pd.Series([math.nan if s is None else s for s in seconds], index=rows.index)
    return rows.loc[key.sort_values(na_position="last", kind="stable").index]


def moments(rows: pd.DataFrame, pick: Callable[[pd.DataFrame], pd.DataFrame] = good) -> Moments:
    """``Moments`` of one problem's rows; ``pick``: ``good`` or ``latest_ok``."""
    retimed = rows["round"].astype(str) == Round.SIDE_BY_SIDE
    if not retimed.any():
        picked = pick(rows)
        return Moments(picked, picked, ())
    first = pick(rows[~retimed])
    return Moments(first, pick(rows), tuple(_standing_pairs(first, pick(rows[retimed]))))


def standing(
    rows: pd.DataFrame, pick: Callable[[pd.DataFrame], pd.DataFrame] = good
) -> pd.DataFrame:
    """``pick``'s rows of each variant, fastest first as verdicts rank them (``Moments``)."""
    return moments(rows, pick).ranked()


def _row(frame: pd.DataFrame, label: str) -> pd.Series:
    return frame[frame["label"] == label].iloc[0]
