"""AUROC of positives vs negatives, with a bootstrap CI that resamples both sides."""

from __future__ import annotations

import numpy as np


def auroc(positives: np.ndarray, negatives: np.ndarray) -> np.ndarray | float:
    """P(a positive scores above a negative), ties counting half: the Mann-Whitney U
    over the pairs. Along the last axis, so that bootstrap draws go in one call."""
    # imported here: every kedro run imports every pipeline's nodes, and scipy.stats
    # takes a second to import from a cold disk
    from scipy.stats import mannwhitneyu  # noqa: PLC0415

    u = mannwhitneyu(positives, negatives, axis=-1, method="asymptotic").statistic
    return u / (positives.shape[-1] * negatives.shape[-1])


def auroc_ci(
    positives: np.ndarray, negatives: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """``(auroc, ci_low, ci_high)``: a 95 % percentile bootstrap that resamples the
    positives and the negatives, each with replacement and apart."""
    rng = np.random.default_rng(seed)
    draws = auroc(
        positives[rng.integers(0, positives.size, (n_boot, positives.size))],
        negatives[rng.integers(0, negatives.size, (n_boot, negatives.size))],
    )
    return (
        float(auroc(positives, negatives)),
        float(np.quantile(draws, 0.025)),
        float(np.quantile(draws, 0.975)),
    )
