"""Feedback: the Riccati solve against closed forms, TVLQR on the inverted disk, and the
closed-loop control interface."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import rollball_jax as rb
from rollball_jax import design as dz


def test_scalar_riccati_matches_closed_form():
    """ẋ = a x + b u, cost q x² + r u², p(T) = p_f: with τ = T − t and p± the roots of
    q + 2ap − (b²/r)p² = 0, (p − p+)/(p − p−) = C e^{−(b²/r)(p+ − p−)τ}. Measured agreement
    1.3e-11 at rtol = atol = 1e-11; bound 1e-8 (a sign or factor-2 error in the RHS is O(1))."""
    a, b, q, r, pf, T = 0.7, 1.3, 2.0, 0.5, 0.25, 3.0
    ts = np.linspace(0.0, T, 31)
    P = dz.riccati(lambda t: jnp.array([[a]]), lambda t: jnp.array([[b]]), [[q]], [[r]], [[pf]], ts,
                   rtol=1e-11, atol=1e-11)[:, 0, 0]
    k = b * b / r
    disc = np.sqrt(a * a + k * q)
    p_plus, p_minus = (a + disc) / k, (a - disc) / k
    C = (pf - p_plus) / (pf - p_minus)
    E = C * np.exp(-k * (p_plus - p_minus) * (T - ts))
    exact = (p_plus - E * p_minus) / (1.0 - E)
    np.testing.assert_allclose(np.asarray(P), exact, rtol=1e-8)


def test_long_horizon_riccati_tends_to_the_algebraic_solution():
    """Double integrator with a damping term: P(0) over a long horizon equals SciPy's
    solve_continuous_are (the infinite-horizon LQR) to 1e-7 (measured 1.6e-11)."""
    A = jnp.array([[0.0, 1.0], [0.3, -0.1]])
    B = jnp.array([[0.0], [1.0]])
    Q, R = np.diag([2.0, 0.5]), np.array([[0.3]])
    P = dz.riccati(lambda t: A, lambda t: B, Q, R, np.zeros((2, 2)), np.linspace(0.0, 40.0, 5), rtol=1e-11, atol=1e-11)
    P_are = scipy.linalg.solve_continuous_are(np.asarray(A), np.asarray(B), Q, R)
    np.testing.assert_allclose(np.asarray(P[0]), P_are, rtol=1e-7)
    assert np.allclose(P[0], P[0].T)


@pytest.fixture(scope="module")
def inverted_disk():
    disk = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.5)])
    x_eq = np.array(disk.initial_state(theta=[np.pi / 2]))  # mass straight above the centre: unstable
    ctl = rb.ConstantControl([0.0])
    return disk, ctl, x_eq, dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0))


def test_tvlqr_rejects_a_perturbation_the_open_loop_plan_does_not(inverted_disk):
    """Inverted disk at rest, φ̇(0) perturbed by 0.01. Open loop (the plan: u = 0) it falls:
    |φ(10) − φ̄| = 0.45 measured (asserted > 0.3). With TVLQR (Q = I, R = 1) every state stays
    within 0.066 of the nominal (asserted < 0.2) and returns towards it (final deviation
    0.0135 measured, asserted < 0.1, against 0.45 open loop)."""
    disk, ctl, x_eq, lqr = inverted_disk
    x0 = x_eq.copy()
    x0[3] = 0.01
    open_loop = rb.simulate(disk, ctl, x0, (0.0, 10.0), n_save=101)
    closed = rb.simulate(disk, lqr, x0, (0.0, 10.0), n_save=101)
    assert abs(open_loop.xs[-1, 2] - x_eq[2]) > 0.3
    dev = np.abs(closed.xs - x_eq)
    assert np.max(dev) < 0.2
    assert np.max(dev[-1]) < 0.1


def test_tvlqr_gains_are_the_riccati_gains_at_rest(inverted_disk):
    """At an equilibrium the linearisation is constant, so K(t) = R⁻¹BᵀP(t) with P from the
    constant-coefficient Riccati solve (measured 8e-16 relative, bound 1e-10); A agrees with
    central differences of the vector field (1e-7)."""
    disk, ctl, x_eq, lqr = inverted_disk
    A, B = dz.linearisation(disk, ctl, 0.0, jnp.asarray(x_eq))
    h = 1e-6
    fd = np.stack([(np.asarray(disk.vector_field(0.0, x_eq + h * e, ctl)) - np.asarray(disk.vector_field(0.0, x_eq - h * e, ctl))) / (2 * h)
                   for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(np.asarray(A), fd, atol=1e-7)
    P = dz.riccati(lambda t: A, lambda t: B, np.eye(4), np.eye(1), np.eye(4), np.asarray(lqr.knots))
    K = np.einsum("Nn,gNM->gnM", np.asarray(B), np.asarray(P))
    np.testing.assert_allclose(np.asarray(lqr.gains), K, rtol=0, atol=1e-10 * np.max(np.abs(K)))
    # the closed-loop control at the nominal state is the nominal control
    u = lqr(3.0, jnp.asarray(x_eq))
    np.testing.assert_allclose(np.asarray(u), 0.0, atol=1e-10)


def test_open_loop_controls_ignore_the_state():
    x = jnp.arange(5.0)
    for c in (rb.ConstantControl([0.3, -0.2]), rb.PaperStep.disk(2), rb.CubicSplineControl([0.0, 1.0, 2.0], [[0.0, 1.0, 0.5], [1.0, 0.0, 2.0]])):
        np.testing.assert_array_equal(np.asarray(c(0.15, x)), np.asarray(c(0.15)))
    with pytest.raises(rb.ModelError, match="closed-loop"):
        dz.TVLQRControl(nominal=rb.ConstantControl([0.0]), knots=jnp.array([0.0, 1.0]), x_nominal=jnp.zeros((2, 4)),
                        x_second=jnp.zeros((2, 4)), gains=jnp.zeros((2, 1, 4)), gains_second=jnp.zeros((2, 1, 4)))(0.5)


def test_closed_loop_scipy_verification_matches_simulate(inverted_disk):
    """The closed loop integrated two ways: ``dz.resimulate(control=TVLQR)`` (SciPy DOP853,
    1e-12) and ``rb.simulate`` with the TVLQR control (diffrax Dopri8, 1e-12), from a
    perturbed start: they agree to 1e-9 (measured ~1e-11). Open loop the same start falls,
    so a verification that silently ignored ``control=`` would differ by O(0.1)."""
    disk, ctl, x_eq, lqr = inverted_disk
    x0 = x_eq.copy()
    x0[3] = 0.01
    prob = dz.DesignProblem(disk, x0, 10.0, n_knots=2, n_samples=11)
    params = prob.initial_params()  # zero spline = the plan u = 0
    ts, xs, _ = dz.resimulate(prob, params, refine=2, control=lqr)
    ref = rb.simulate(disk, lqr, x0, (0.0, 10.0), ts=ts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xs, ref.xs, rtol=0, atol=1e-9)
    _, xs_open, _ = dz.resimulate(prob, params, refine=2)
    assert np.max(np.abs(xs_open - xs)) > 0.1
    ver = dz.verify(prob, dz.Cost(dz.TargetGC((0.0,), 1.0)), params, refine=2, control=lqr)
    np.testing.assert_allclose(ver.xs, xs[: ver.xs.shape[0]], rtol=0, atol=1e-12)


def test_state_weights_and_nominal_validation(inverted_disk):
    disk, ctl, x_eq, _ = inverted_disk
    Q = np.asarray(dz.state_weights(disk, 2.0, phi=50.0))
    np.testing.assert_array_equal(Q, np.diag([2.0, 2.0, 50.0, 2.0]))  # labels theta1, theta1_dot, phi, phi_dot
    with pytest.raises(rb.ModelError, match="unknown state label 'z1'"):
        dz.state_weights(disk, z1=1.0)
    with pytest.raises(rb.ModelError, match="non-negative"):
        dz.state_weights(disk, phi=-1.0)
    ts = np.linspace(0.0, 10.0, 11)
    with pytest.raises(rb.ModelError, match="nominal must be"):
        dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), nominal=(ts, np.zeros((11, 3))))
    with pytest.raises(rb.ModelError, match="increase strictly"):
        dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), nominal=(ts[::-1], np.zeros((11, 4))))
    # a given nominal equal to the open-loop solve gives the same gains as the default
    xs = np.repeat(x_eq[None], 11, axis=0)
    a = dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), n_grid=11)
    b = dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), nominal=(ts, xs))
    np.testing.assert_allclose(np.asarray(b.gains), np.asarray(a.gains), rtol=0, atol=1e-12 * float(np.max(np.abs(a.gains))))


def test_saturated_feedback_clips_every_component(inverted_disk):
    """u_max bounds the closed-loop control exactly; unsaturated it is ū − K(x − x̄)."""
    disk, ctl, x_eq, lqr = inverted_disk
    sat = dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), u_max=0.05)
    x = jnp.asarray(x_eq) + jnp.array([0.0, 0.0, 0.3, 0.0])
    u_free = float(lqr(2.0, x)[0])
    assert abs(u_free) > 0.05  # the free feedback asks for more than the bound
    assert float(sat(2.0, x)[0]) == pytest.approx(np.sign(u_free) * 0.05, abs=1e-15)
    small = jnp.asarray(x_eq) + jnp.array([0.0, 0.0, 1e-4, 0.0])
    assert float(sat(2.0, small)[0]) == pytest.approx(float(lqr(2.0, small)[0]), rel=1e-12)
    with pytest.raises(rb.ModelError, match="u_max"):
        dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), u_max=0.0)
