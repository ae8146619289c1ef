"""Keeping |q| = 1: step-wise projection (VersorProjection) and the DAE (7.3) with SUNDIALS IDA.

Agreement criterion with the ODE form (7.2) (explicit Dopri8 at 1e-10 — 1e-12 where the
comparison needs it — at the reference times): ≤ 1e-7 absolute.
"""

import diffrax as dfx
import numpy as np
import pytest

import rollball_jax as rb
from conftest import PAPER_BALL_X0, make_paper_ball, make_paper_disk
from rollball_jax.jacobians import vector_field
from rollball_jax.projection import VersorProjection, project_versor, versor_norm_error

Q = slice(6, 10)  # versor of the paper ball (n = 3): x[2n : 2n + 4]


@pytest.fixture(scope="module")
def ode(reference):
    """Reference times and the ODE (7.2) solution of the paper ball (Dopri8, 1e-10)."""
    ref = reference["ball"]
    ts = np.asarray(ref["t_out"])
    sol = rb.simulate(make_paper_ball(), rb.PaperStep.ball(3), ref["x0"], (0.0, 20.0), ts=ts, rtol=1e-10, atol=1e-10)
    return ts, sol.xs, np.asarray(ref["x0"])


# ---- projection --------------------------------------------------------------------------


def test_project_versor(unchecked_types):
    ball = make_paper_ball()
    x = np.asarray(PAPER_BALL_X0).copy()
    x[Q] = [2.0, 0.0, 1.0, -2.0]
    y = np.asarray(project_versor(ball, np.stack([x, x])))
    np.testing.assert_allclose(y[:, Q], [[2 / 3, 0.0, 1 / 3, -2 / 3]] * 2, rtol=1e-15)
    np.testing.assert_array_equal(np.delete(y, np.s_[6:10], axis=1), np.delete(np.stack([x, x]), np.s_[6:10], axis=1))
    with pytest.raises(rb.ModelError):
        project_versor(make_paper_disk(), np.zeros(10))
    with pytest.raises(rb.ModelError):
        VersorProjection(dfx.Dopri8(), make_paper_disk())


def test_projection_wrapper_forwards_solver_kind():
    ball = make_paper_ball()
    explicit = VersorProjection(dfx.Dopri8(), ball)
    implicit = VersorProjection(dfx.Kvaerno5(), ball)
    assert isinstance(explicit, dfx.AbstractAdaptiveSolver) and not isinstance(explicit, dfx.AbstractImplicitSolver)
    assert isinstance(implicit, dfx.AbstractImplicitSolver)
    assert explicit.order(None) == 8 and explicit.start == 6


def test_projection_matches_ode(ode):
    ts, xs, x0 = ode
    ball = make_paper_ball()
    sol = rb.simulate(ball, rb.PaperStep.ball(3), x0, (0.0, 20.0), ts=ts, solver=VersorProjection(dfx.Dopri8(), ball),
                      rtol=1e-10, atol=1e-10)
    assert np.abs(sol.xs - xs).max() <= 1e-7
    assert np.abs(np.asarray(versor_norm_error(ball, sol.xs))).max() <= 1e-15


def test_projection_stops_versor_drift_on_long_loose_runs():
    # t = 200 at rtol = atol = 1e-6 (Dopri8). Without projection |q| − 1 is ~1e-6 at the saved
    # points (dense-output error) and ~1e-8 at the final step; with it, |q| = 1 to rounding
    # everywhere (steps and dense output are projected). Observed: 1.3e-6 / 2.5e-8 vs 2.2e-16.
    ball = make_paper_ball()
    ctl = rb.PaperStep.ball(3)
    ts = np.linspace(0.0, 200.0, 201)
    drift = {}
    for label, solver in (("plain", dfx.Dopri8()), ("projected", VersorProjection(dfx.Dopri8(), ball))):
        sol = rb.integrate(ball, ctl, PAPER_BALL_X0, ts, rtol=1e-6, atol=1e-6, solver=solver)
        assert sol.result == dfx.RESULTS.successful
        saved, final = sol.ys
        drift[label] = (np.abs(np.asarray(versor_norm_error(ball, saved))).max(),
                        abs(float(versor_norm_error(ball, final[-1]))))
    assert drift["plain"][0] > 1e-7 and drift["plain"][1] > 1e-9
    assert drift["projected"][0] <= 1e-15 and drift["projected"][1] <= 1e-15


# ---- DAE (7.3) with IDA ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dae():
    pytest.importorskip("sksundae")
    from rollball_jax import dae as dae_module

    return dae_module


def test_dae_residual_and_iteration_matrix(dae, unchecked_types):
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    rng = np.random.default_rng(5)
    x = np.asarray(PAPER_BALL_X0) + 0.2 * rng.normal(size=15)
    x[Q] /= np.linalg.norm(x[Q])
    xd = np.asarray(vector_field(ball, ctl, 0.05, x))
    # a consistent point: F(t, x, f(t, x)) = 0 (|q| = 1 makes the constraint row vanish)
    np.testing.assert_allclose(dae.dae_residual(ball, ctl, 0.05, x, xd), 0.0, atol=1e-15)
    assert dae.dae_mass_matrix(ball)[6] == 0.0 and dae.dae_mass_matrix(ball).sum() == 14
    # iteration matrix ∂F/∂x + c_j ∂F/∂ẋ vs central differences (h = 1e-6: error ~1e-10)
    cj, h = 37.0, 1e-6
    fd = np.zeros((15, 15))
    for j in range(15):
        e = np.zeros(15)
        e[j] = h
        fd[:, j] = (dae.dae_residual(ball, ctl, 0.05, x + e, xd + cj * e) - dae.dae_residual(ball, ctl, 0.05, x - e, xd - cj * e)) / (2 * h)
    np.testing.assert_allclose(dae.dae_iteration_matrix(ball, ctl, 0.05, x, cj), fd, atol=1e-7)
    with pytest.raises(rb.ModelError):
        dae.solve_dae(make_paper_disk(), rb.PaperStep.disk(4), np.zeros(10), (0.0, 1.0))


def test_paper_dae_before_q0_crossing(dae, ode):
    # The paper's (7.3), q0 algebraic, is of index 1 while q0 ≠ 0: on [0, 9] (q0 > 0) IDA at
    # 1e-12 agrees with (7.2) (observed 6.5e-10) and keeps |q| = 1 (observed 1.2e-13).
    ts, xs, x0 = ode
    keep = ts <= 9.0
    res = dae.solve_dae(make_paper_ball(), rb.PaperStep.ball(3), x0, (0.0, 9.0), ts[keep], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(res.ts, ts[keep])
    assert set(res.algebraic) == {6}
    assert np.abs(res.xs - xs[keep]).max() <= 1e-7
    assert np.abs(np.linalg.norm(res.xs[:, Q], axis=1) - 1.0).max() <= 1e-12


def test_paper_dae_stops_at_q0_crossing(dae, ode):
    # q0 of the paper ball crosses 0 near t = 9.2067 (q0(20) ≈ −0.48). There ∂(|q|² − 1)/∂q0 = 2 q0
    # vanishes and (7.3) is no longer of index 1: IDA's step size collapses (corrector failures,
    # h → 1e-314) or it steps across with errors of 1e-4, so solve_dae raises at the crossing.
    ts, xs, x0 = ode
    ball = make_paper_ball()
    dense = rb.simulate(ball, rb.PaperStep.ball(3), x0, (0.0, 20.0), ts=np.linspace(9.0, 9.5, 51), rtol=1e-10, atol=1e-10)
    t_cross = dae.q0_crossings(dense.ts, dense.xs, ball)[0]
    with pytest.raises(rb.SimulationError) as info:
        dae.solve_dae(ball, rb.PaperStep.ball(3), x0, (0.0, 20.0), ts, rtol=1e-10, atol=1e-10, max_num_steps=20_000)
    assert abs(info.value.t_reached - t_cross) < 1e-3, (info.value.t_reached, t_cross)
    assert "q0" in str(info.value) or "q_k" in str(info.value)


def test_dae_with_switching_algebraic_variable_matches_ode(dae, ode):
    # The well-posed variant of (7.3): the constraint row replaces the row of the largest |q_k|
    # (switched by an IDA event when that |q_k| falls below 1/4). Over [0, 20] at 1e-12: observed
    # 8e-10 from (7.2), |q| − 1 ≤ 5e-13; algebraic variables q0, q1, q3 in turn.
    ts, xs, x0 = ode
    res = dae.solve_dae(make_paper_ball(), rb.PaperStep.ball(3), x0, (0.0, 20.0), ts, rtol=1e-12, atol=1e-12,
                        algebraic="largest")
    np.testing.assert_array_equal(res.ts, ts)
    assert len(set(res.algebraic)) > 1  # it did switch away from q0
    assert np.abs(res.xs - xs).max() <= 1e-7
    assert np.abs(np.linalg.norm(res.xs[:, Q], axis=1) - 1.0).max() <= 2e-12
