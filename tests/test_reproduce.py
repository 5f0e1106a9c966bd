import numpy as np
import pytest

import iglu_np
from iglu_np import reproduce


def test_naive_float32_gradient_loses_sign_and_ours_does_not():
    x = -np.logspace(2, 5, 200).astype(np.float32)
    truth = iglu_np.iglu.dx(x.astype(np.float64))
    naive = reproduce.naive_iglu_dx_float32(x)
    ours = iglu_np.iglu.dx(x)
    assert (naive <= 0).any()  # the textbook formula cancels to garbage
    assert (ours > 0).all()
    np.testing.assert_allclose(ours, truth, rtol=1e-6)


def test_gate_gap():
    g, x = reproduce.gate_gap(1.0)
    assert 0.02263 < g < 0.02265 and abs(abs(x) - 3.19) < 0.01


def test_figures_and_report(tmp_path):
    pytest.importorskip("matplotlib")
    import argparse

    args = argparse.Namespace(quick=True, out=str(tmp_path), skip="speed,table4")
    assert reproduce.main(args) == 0
    report = (tmp_path / "report.md").read_text()
    for fig in ("fig1_activations.png", "fig2_iglu_sigma.png", "fig3_gate_gap.png",
                "fig4_tails.png"):
        assert fig in report and (tmp_path / fig).stat().st_size > 10_000
    assert "0.0226" in report
