import doctest

import numpy as np
import pytest

import iglu_np
from iglu_np import stats


@pytest.mark.parametrize(
    "sample,alpha,tol",
    [
        (lambda r, n: r.standard_cauchy(n), 1.0, 0.12),
        (lambda r, n: r.standard_t(2, n), 2.0, 0.3),
        (lambda r, n: r.standard_t(3, n), 3.0, 0.5),
        (lambda r, n: r.pareto(1.5, n) + 1, 1.5, 0.15),
    ],
)
def test_hill_recovers_known_tail_indices(sample, alpha, tol):
    r = iglu_np.tail_index(sample(np.random.default_rng(3), 200_000))
    assert abs(r.alpha - alpha) < tol
    # the documented default k = floor(sqrt(n)), n the finite non-zero sample size
    assert r.n == 200_000 and r.k == int(np.floor(np.sqrt(r.n)))
    assert r.stderr == pytest.approx(r.alpha / np.sqrt(r.k))


def test_gaussian_has_a_light_tail_that_grows_with_n():
    rng = np.random.default_rng(4)
    small = iglu_np.tail_index(rng.standard_normal(2_000)).alpha
    large = iglu_np.tail_index(rng.standard_normal(500_000)).alpha
    assert 4 < small < large


def test_tails_and_errors():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.pareto(1.0, 50_000) + 1, -(rng.pareto(3.0, 50_000) + 1)])
    assert abs(iglu_np.tail_index(x, tail="upper").alpha - 1.0) < 0.2
    assert abs(iglu_np.tail_index(x, tail="lower").alpha - 3.0) < 0.6
    with pytest.raises(ValueError, match="tail"):
        iglu_np.tail_index(x, tail="left")
    with pytest.raises(ValueError, match="k"):
        iglu_np.tail_index([1.0, 2.0], k=5)
    # NaN/inf/zeros are dropped, not propagated
    y = np.concatenate([rng.standard_cauchy(10_000), [np.nan, np.inf, 0.0]])
    assert np.isfinite(iglu_np.tail_index(y).alpha)


def test_docstring_example():
    res = doctest.testmod(stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0
