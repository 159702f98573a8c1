"""A mergeable quantile sketch of bounded size (`QuantileSketch`), for the live percentiles of a run of any
length: the progress line, the web UI's running row. The verdicts never read it: their exact percentiles
come from the raw records (`analysis.verdict.judge_step`).

Values go into logarithmic buckets (DDSketch: bucket i holds (gamma^(i-1), gamma^i], gamma = (1 + a) /
(1 - a)), so any quantile is returned within a relative error `a` (default 0.5%) of a value of the data
at that rank, whatever the count: a million TTFTs take a few hundred counters, not a million floats.
Zero and values under `MIN_VALUE` share one bucket (returned as 0); negative values (a client wait a
clock offset made negative) their own mirrored buckets. Two sketches of the same accuracy merge by adding
their counters (`merge`), so per-worker or per-second sketches add up to the step's.

    >>> s = QuantileSketch(); s.add([0.1, 0.2, 0.3, 0.4]); round(s.quantile(0.5), 2)
    0.25
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["MIN_VALUE", "QuantileSketch"]

#: values of magnitude at or under this (1 ns) count as zero
MIN_VALUE = 1e-9


class QuantileSketch:
    """Counts of values in relative-accuracy buckets (see the module docstring)."""

    __slots__ = ("accuracy", "count", "_gamma_log", "_pos", "_neg", "_zero")

    def __init__(self, accuracy: float = 0.005) -> None:
        self.accuracy = accuracy
        self._gamma_log = math.log((1 + accuracy) / (1 - accuracy))
        #: bucket index -> count, for positive and (by magnitude) negative values
        self._pos: dict[int, int] = {}
        self._neg: dict[int, int] = {}
        self._zero = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def _fold(self, store: dict[int, int], magnitudes: np.ndarray) -> None:
        keys = np.ceil(np.log(magnitudes) / self._gamma_log).astype(np.int64)
        uniq, counts = np.unique(keys, return_counts=True)
        for key, n in zip(uniq.tolist(), counts.tolist(), strict=True):
            store[key] = store.get(key, 0) + n

    def add(self, values: Iterable[float] | np.ndarray) -> None:
        """Add values (NaN and None are left out)."""
        v = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
        v = v[~np.isnan(v)]
        if not v.size:
            return
        self.count += int(v.size)
        small = np.abs(v) <= MIN_VALUE
        self._zero += int(small.sum())
        if (pos := v[(v > 0) & ~small]).size:
            self._fold(self._pos, pos)
        if (neg := v[(v < 0) & ~small]).size:
            self._fold(self._neg, -neg)

    def merge(self, other: QuantileSketch) -> None:
        """Add another sketch's counts (same accuracy)."""
        if other.accuracy != self.accuracy:
            raise ValueError("sketches of different accuracy do not merge")
        for mine, theirs in ((self._pos, other._pos), (self._neg, other._neg)):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n
        self._zero += other._zero
        self.count += other.count

    def _value(self, key: int) -> float:
        """The bucket's representative: within `accuracy` of every value in (gamma^(key-1), gamma^key]."""
        return 2.0 * math.exp(key * self._gamma_log) / (1.0 + math.exp(self._gamma_log))

    def _at_rank(self, rank: int) -> float:
        """The value of the `rank`-th smallest value (from 0), within the accuracy."""
        seen = 0
        for key in sorted(self._neg, reverse=True):  # most negative first
            seen += self._neg[key]
            if seen > rank:
                return -self._value(key)
        seen += self._zero
        if seen > rank:
            return 0.0
        for key in sorted(self._pos):
            seen += self._pos[key]
            if seen > rank:
                return self._value(key)
        return self._value(max(self._pos)) if self._pos else 0.0

    def quantile(self, q: float) -> float | None:
        """The value at quantile `q` (0-1), interpolated between ranks as numpy's default percentile is,
        within the relative accuracy; None when empty."""
        if not self.count:
            return None
        rank = q * (self.count - 1)
        low = math.floor(rank)
        value = self._at_rank(low)
        if rank > low:
            value += (rank - low) * (self._at_rank(low + 1) - value)
        return value

    def buckets(self) -> int:
        """How many counters it holds (its size)."""
        return len(self._pos) + len(self._neg) + 1
