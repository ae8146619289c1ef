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
