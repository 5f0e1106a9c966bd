"""Tail statistics for choosing IGLU's sigma.

The IGLU paper argues that the gate's scale should match how heavy the tails of the
pre-activations are. :func:`tail_index` estimates that heaviness from a sample.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["tail_index", "TailIndex"]


class TailIndex(NamedTuple):
    alpha: float  # tail index: P(|X| > t) ~ t^-alpha
    stderr: float  # asymptotic standard error alpha / sqrt(k)
    k: int  # number of upper order statistics used
    n: int  # finite, non-zero sample size


def tail_index(x, k=None, tail: str = "both") -> TailIndex:
    r"""Hill estimate of the tail index of a sample.

    .. math::

        \hat\gamma = \frac{1}{k}\sum_{i=1}^{k} \log\frac{X_{(i)}}{X_{(k+1)}},
        \qquad \hat\alpha = 1/\hat\gamma

    where :math:`X_{(1)} \ge X_{(2)} \ge \ldots` are the sorted magnitudes. Heavy tails give a
    small alpha (Cauchy: 1, Student-t with nu degrees of freedom: nu); light tails give a
    large alpha that keeps growing with the sample size (Gaussian: no finite tail index).

    Parameters
    ----------
    x : array_like
        Sample (any shape; NaN, inf and zeros are dropped).
    k : int, optional
        Number of upper order statistics. The default ``floor(sqrt(n))`` is the usual
        bias/variance compromise: the Hill estimator's variance falls like 1/k while its
        bias grows with k/n whenever the tail is only asymptotically a power law
        (Student-t, any sample of pre-activations), and sqrt(n) keeps k -> inf and
        k/n -> 0 together, which consistency requires.
    tail : {"both", "upper", "lower"}
        Use |x|, only positive values, or only (the magnitudes of) negative values.

    Returns
    -------
    TailIndex
        ``(alpha, stderr, k, n)``.

    Examples
    --------
    >>> import numpy as np, iglu_np
    >>> x = np.random.default_rng(0).standard_cauchy(100_000)
    >>> r = iglu_np.tail_index(x)
    >>> round(r.alpha, 1), r.k
    (1.0, 316)
    """
    a = np.asarray(x, dtype=np.float64).ravel()
    if tail == "both":
        a = np.abs(a)
    elif tail == "upper":
        a = a[a > 0]
    elif tail == "lower":
        a = -a[a < 0]
    else:
        raise ValueError(f"tail_index: tail must be 'both', 'upper' or 'lower', not {tail!r}")
    a = a[np.isfinite(a) & (a > 0)]
    n = a.size
    if k is None:
        k = int(math.isqrt(n))
    k = int(k)
    if not 2 <= k < n:
        raise ValueError(f"tail_index: need 2 <= k < n (finite non-zero values); got k={k}, n={n}")
    top = np.partition(a, n - k - 1)[n - k - 1 :]  # the k+1 largest, smallest first
    gamma = float(np.mean(np.log(top[1:])) - math.log(top[0]))
    if gamma <= 0:
        return TailIndex(math.inf, math.inf, k, n)
    alpha = 1.0 / gamma
    return TailIndex(alpha, alpha / math.sqrt(k), k, n)
