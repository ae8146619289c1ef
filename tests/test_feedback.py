"""Feedback: the Riccati solve against closed forms, TVLQR on the inverted disk, and the
closed-loop control interface."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import rollball_jax as rb
from rollball_jax import design as dz
from conftest import recorded_compiles


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


def test_riccati_finite_escape_raises():
    """An indefinite weight can make the Riccati solution escape to infinity in finite time:
    ṗ = p² + 1 backwards from p(5) = 0 is p(t) = tan(t − 5), which escapes at t = 5 − π/2.
    The solve stops there (the step size collapses; the rejection limit ends it instead of
    spending max_steps: 41 ms → 1 ms compiled, measured) and ``riccati`` raises; over a horizon
    short of the escape (1.5 < π/2) the same equation matches tan to 1e-9 at tolerance 1e-12
    (measured 1.8e-11; 2.2e-8 at the default 1e-9, the solution growing 14-fold)."""
    one = lambda t: jnp.array([[1.0]])
    zero = lambda t: jnp.array([[0.0]])
    with pytest.raises(rb.SimulationError, match="Riccati solve failed"):
        dz.riccati(zero, one, [[-1.0]], [[1.0]], [[0.0]], np.linspace(0.0, 5.0, 6))
    ts = np.linspace(3.5, 5.0, 4)
    P = dz.riccati(zero, one, [[-1.0]], [[1.0]], [[0.0]], ts, rtol=1e-12, atol=1e-12)[:, 0, 0]
    np.testing.assert_allclose(np.asarray(P), np.tan(ts - 5.0), rtol=1e-9, atol=1e-14)


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


def test_second_tvlqr_of_the_same_structure_compiles_nothing_new(inverted_disk):
    """TVLQR for new weights and a new nominal of the same structure reuses the compiled
    linearisation, Riccati solve and gains (it compiled the Riccati solve and the gains anew
    at every call: a second call on the paper ball took 3.3–3.8 s, now 0.1 s), and its gains
    are still R⁻¹BᵀP with P from :func:`riccati` for those weights (measured 1.3e-15
    relative; bound 1e-10 as in the test above: the two Riccati programs are compiled
    separately and could take different adaptive steps on another CPU, while a wrong
    factor or transpose is an O(1) error)."""
    disk, ctl, x_eq, _ = inverted_disk
    Q, R = np.diag([1.0, 2.0, 3.0, 4.0]), np.array([[0.5]])
    ts = np.linspace(0.0, 10.0, 401)
    with recorded_compiles() as compiles:
        lqr = dz.tvlqr(disk, ctl, x_eq, (0.0, 10.0), Q, R, nominal=(ts, np.tile(x_eq, (401, 1))))
    heavy = [n for n in compiles if any(k in n for k in ("tvlqr", "diffeqsolve", "riccati", "linearisation"))]
    assert heavy == [], compiles
    A, B = dz.linearisation(disk, ctl, 0.0, jnp.asarray(x_eq))
    P = dz.riccati(lambda t: A, lambda t: B, Q, R, Q, ts)
    K = np.einsum("nm,Nm,gNM->gnM", np.linalg.inv(R), np.asarray(B), np.asarray(P))
    np.testing.assert_allclose(np.asarray(lqr.gains), K, rtol=0, atol=1e-10 * np.max(np.abs(K)))


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


# --------------------------------------------------------------------------------------
# geometric error coordinates (error="geometric")
# --------------------------------------------------------------------------------------

from rollball_jax.app.config import load_config  # noqa: E402
from rollball_jax.design import feedback as fb  # noqa: E402
from rollball_jax.geometry import hat, quat_multiply  # noqa: E402


def _rotvec_quat(v):
    a = np.linalg.norm(v)
    return np.concatenate([[np.cos(a / 2)], np.sin(a / 2) * np.asarray(v) / a])


@pytest.fixture(scope="module")
def paper_ball():
    cfg = load_config("paper-ball")
    return cfg.model, np.asarray(cfg.x0)


def test_rotation_error_is_the_small_angle_rotation_vector(paper_ball):
    """state_error on the ball: zero at the nominal; for q = q̄ ⊗ exp(v/2) the orientation
    block is 2 sin(|v|/2) v/|v|, i.e. v to O(|v|³) (|error − v| = |v| − 2 sin(|v|/2) ≤ |v|³/24,
    asserted with 1e-15 slack); the same for −q; the other components are x − x̄;
    state_retract is its exact inverse (1e-15) and returns a unit versor."""
    model, x0 = paper_ball
    k = model.versor_index
    rng = np.random.default_rng(0)
    q_bar = rng.normal(size=4)
    x_bar = x0.copy()
    x_bar[k : k + 4] = q_bar / np.linalg.norm(q_bar)
    x_bar[k + 4 : k + 7] = [0.3, -0.2, 0.1]
    np.testing.assert_allclose(np.asarray(fb.state_error(x_bar, x_bar, k)), 0.0, rtol=0, atol=1e-15)
    for angle in (1e-3, 0.05, 0.3):
        v = angle * rng.normal(size=3)
        v *= angle / np.linalg.norm(v)
        x = x_bar + 0.01 * rng.normal(size=x_bar.size)
        x[k : k + 4] = np.asarray(quat_multiply(x_bar[k : k + 4], _rotvec_quat(v)))
        e = np.asarray(fb.state_error(x, x_bar, k))
        assert e.shape == (model.state_size - 1,)
        assert np.linalg.norm(e[k : k + 3] - v) <= angle**3 / 24 + 1e-15
        np.testing.assert_allclose(e[:k], x[:k] - x_bar[:k], rtol=0, atol=1e-15)
        np.testing.assert_allclose(e[k + 3 :], x[k + 4 :] - x_bar[k + 4 :], rtol=0, atol=1e-15)
        x_neg = x.copy()
        x_neg[k : k + 4] *= -1.0  # the same rotation
        np.testing.assert_allclose(np.asarray(fb.state_error(x_neg, x_bar, k)), e, rtol=0, atol=1e-15)
        back = np.asarray(fb.state_retract(x_bar, e, k))
        np.testing.assert_allclose(back, x, rtol=0, atol=1e-15)
        assert abs(np.linalg.norm(back[k : k + 4]) - 1.0) < 1e-15


def test_periodic_rail_angles_are_wrapped(paper_ball, inverted_disk):
    """The paper ball's three rails are circles: a mass a full turn (2π) ahead has zero
    error in the geometric coordinates (1e-12) and 2π in x − x̄; an error of 3 rad stays 3."""
    model, x0 = paper_ball
    assert fb.periodic_angles(model) == (0, 1, 2)
    disk = inverted_disk[0]
    assert fb.periodic_angles(disk) == (0,)
    assert fb.periodic_angles(rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.SpokeRail([1.0, 0.0, 0.0], [-0.5, 0.5])])) == ()
    x = x0.copy()
    x[0] += 2 * np.pi
    x[1] += 3.0
    k = model.versor_index
    e = np.asarray(fb.state_error(x, x0, k, wrap=fb.periodic_angles(model)))
    np.testing.assert_allclose(e[:3], [0.0, 3.0, 0.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(fb.state_error(x, x0, k))[:3], [2 * np.pi, 3.0, 0.0], rtol=0, atol=1e-12)


def test_error_linearisation_orientation_block(paper_ball, inverted_disk):
    """At a generic ball state the linearised error dynamics have the kinematic rows
    δφ̇ = δΩ − Ω̄ × δφ exactly (1e-12) and no input in them; B_e's θ̇ rows are the identity
    (u = θ̈). For the disk (no versor) they equal the plain Jacobians (A, B) (1e-12)."""
    model, x0 = paper_ball
    k = model.versor_index
    x = x0.copy()
    x[3:6] = [0.1, 0.2, -0.3]
    q = np.array([0.9, 0.1, -0.3, 0.2])
    x[k : k + 4] = q / np.linalg.norm(q)
    omega = np.array([0.3, -0.2, 0.5])
    x[k + 4 : k + 7] = omega
    ctl = rb.ConstantControl([0.1, -0.2, 0.05])
    A_e, B_e = (np.asarray(M) for M in fb.error_linearisation(model, ctl, 0.0, jnp.asarray(x), k))
    assert A_e.shape == (14, 14) and B_e.shape == (14, 3)
    np.testing.assert_allclose(A_e[k : k + 3, k : k + 3], -np.asarray(hat(jnp.asarray(omega))), rtol=0, atol=1e-12)
    np.testing.assert_allclose(A_e[k : k + 3, k + 3 : k + 6], np.eye(3), rtol=0, atol=1e-12)
    others = np.r_[0:k, k + 6 : 14]
    np.testing.assert_allclose(A_e[k : k + 3][:, others], 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(B_e[k : k + 3], 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(B_e[3:6], np.eye(3), rtol=0, atol=1e-12)
    disk, dctl, x_eq, _ = inverted_disk
    A, B = dz.linearisation(disk, dctl, 0.0, jnp.asarray(x_eq))
    A2, B2 = fb.error_linearisation(disk, dctl, 0.0, jnp.asarray(x_eq), None)
    np.testing.assert_allclose(np.asarray(A2), np.asarray(A), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(B2), np.asarray(B), rtol=0, atol=1e-12)


@pytest.mark.slow
def test_geometric_tvlqr_rejects_an_orientation_error(paper_ball):
    """The paper ball at rest with its CM above the GC (an inverted pendulum, time constant
    ≈ 1), plan u = 0 over [0, 8], started 0.05 rad off about every body axis. Open loop it
    falls: the GC leaves the nominal by 0.26 (measured; asserted > 0.15). With the geometric
    TVLQR (GC weight 100, the rest 10, R = 0.3; gains (G, 3, 14)) the GC stays within 9.6e-3
    (asserted < 2e-2) and the final error without the orientation is 1.3e-2 (asserted
    < 3e-2, against 0.36 open loop). On the nominal model the x − x̄ TVLQR with the same
    weights gives the same closed loop to first order (the two error maps agree to O(|e|²)
    and the versor's length direction carries no weight in the pull-back): measured max
    state difference 6e-8, asserted < 1e-5. At the nominal it returns the plan (1e-12)."""
    model, x0 = paper_ball
    k = model.versor_index
    ctl = rb.ConstantControl([0.0, 0.0, 0.0])
    Q = dz.state_weights(model, 10.0, z1=100.0, z2=100.0)
    lqr = dz.tvlqr(model, ctl, x0, (0.0, 8.0), Q, 0.3 * np.eye(3), n_grid=161, error="geometric")
    assert lqr.gains.shape == (161, 3, 14) and lqr.versor_index == k and lqr.wrap == (0, 1, 2)
    np.testing.assert_allclose(np.asarray(lqr(2.0, jnp.asarray(lqr.x_nominal[40]))), 0.0, atol=1e-12)
    x = x0.copy()
    x[k : k + 4] = np.asarray(quat_multiply(x0[k : k + 4], _rotvec_quat(np.full(3, 0.05))))
    ts = np.linspace(0.0, 8.0, 81)
    nominal = rb.simulate(model, ctl, x0, (0.0, 8.0), ts=ts)
    opened = rb.simulate(model, ctl, x, (0.0, 8.0), ts=ts)
    closed = rb.simulate(model, lqr, x, (0.0, 8.0), ts=ts)
    gc = slice(k + 7, k + 9)
    assert np.max(np.abs(opened.xs[:, gc] - nominal.xs[:, gc])) > 0.15
    assert np.max(np.abs(closed.xs[:, gc] - nominal.xs[:, gc])) < 2e-2
    e_end = np.asarray(fb.state_error(closed.xs[-1], nominal.xs[-1], k))
    assert np.linalg.norm(np.r_[e_end[:k], e_end[k + 3 :]]) < 3e-2
    plain = rb.simulate(model, dz.tvlqr(model, ctl, x0, (0.0, 8.0), Q, 0.3 * np.eye(3), n_grid=161), x, (0.0, 8.0), ts=ts)
    assert np.max(np.abs(plain.xs - closed.xs)) < 1e-5


@pytest.mark.slow
def test_geometric_weights_and_validation(paper_ball, inverted_disk):
    """An (N, N) weight is pulled back along the nominal: w on each of q0…q3 is w/4 on each
    component of δφ, so Q = diag(…, 4, 4, 4, 4, …) and the (N − 1)-weight with 1 on δφ give
    the same gains (1e-9 relative). Wrong shapes and an unknown error kind are refused."""
    model, x0 = paper_ball
    ctl = rb.ConstantControl([0.0, 0.0, 0.0])
    k = model.versor_index
    Q_full = np.eye(15)
    Q_full[k : k + 4, k : k + 4] *= 4.0
    # n_grid = 161 as in the test above: the (N, N) case reuses its compiled program (~3 s)
    a = dz.tvlqr(model, ctl, x0, (0.0, 2.0), Q_full, n_grid=161, error="geometric")
    b = dz.tvlqr(model, ctl, x0, (0.0, 2.0), np.eye(14), n_grid=161, error="geometric")
    scale = float(np.max(np.abs(a.gains)))
    np.testing.assert_allclose(np.asarray(a.gains), np.asarray(b.gains), rtol=0, atol=1e-9 * scale)
    with pytest.raises(rb.ModelError, match="'Q' must have shape"):
        dz.tvlqr(model, ctl, x0, (0.0, 2.0), np.eye(13), n_grid=21, error="geometric")
    with pytest.raises(rb.ModelError, match="'Q' must have shape"):
        dz.tvlqr(model, ctl, x0, (0.0, 2.0), np.eye(14), n_grid=21)  # (N − 1) only with geometric
    with pytest.raises(rb.ModelError, match="error must be"):
        dz.tvlqr(model, ctl, x0, (0.0, 2.0), n_grid=21, error="lie")
    disk, dctl, x_eq, lqr = inverted_disk
    geo = dz.tvlqr(disk, dctl, x_eq, (0.0, 10.0), error="geometric")  # no versor: same gains, wrapped angle
    np.testing.assert_allclose(np.asarray(geo.gains), np.asarray(lqr.gains), rtol=0, atol=1e-12 * float(np.max(np.abs(lqr.gains))))
    x = jnp.asarray(x_eq) + jnp.array([2 * np.pi, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(geo(1.0, x)), np.asarray(geo(1.0, jnp.asarray(x_eq))), atol=1e-12)
    # found by a fresh-user trial: n_grid = 1 built a controller returning NaN, an indefinite
    # or asymmetric R failed in the Riccati solve with a generic message, a NaN nominal was
    # accepted, and gains of the wrong shape surfaced as JAX's dot_general error
    for kw, match in (({"n_grid": 1}, "'n_grid' must be an integer >= 3"),
                      ({"R": np.zeros((1, 1))}, "'R' must be positive definite"),
                      ({"R": -np.eye(1)}, "'R' must be positive definite; its smallest eigenvalue is -1"),
                      ({"Q": np.diag([1.0, 1.0, -1.0, 1.0])}, "'Q' must be positive semi-definite"),
                      ({"Qf": np.triu(np.ones((4, 4)))}, "'Qf' must be a finite symmetric matrix")):
        with pytest.raises(rb.ModelError, match=match):
            dz.tvlqr(disk, dctl, x_eq, (0.0, 10.0), **kw)
    ts = np.linspace(0.0, 10.0, 5)
    xs = np.tile(x_eq, (5, 1))
    xs_nan = xs.copy()
    xs_nan[2, 0] = np.nan
    with pytest.raises(rb.ModelError, match=r"nominal states must be finite; the one at t = 5 \(index 2\)"):
        dz.tvlqr(disk, dctl, None, (0.0, 10.0), nominal=(ts, xs_nan))
    with pytest.raises(rb.ModelError, match=r"'x0' must have shape \(4,\)"):
        dz.tvlqr(disk, dctl, np.array([np.nan, 1.0, 2.0]), (0.0, 10.0), nominal=(ts, xs))
    with pytest.raises(rb.ModelError, match="tvlqr needs 'x0'"):
        dz.tvlqr(disk, dctl, None, (0.0, 10.0))
    for bad in ({"gains": lqr.gains[:, :, :3], "gains_second": lqr.gains_second[:, :, :3]},  # M = 3, N = 4
                {"gains": jnp.swapaxes(lqr.gains, 1, 2), "gains_second": jnp.swapaxes(lqr.gains_second, 1, 2)}):
        with pytest.raises(rb.ModelError, match="TVLQRControl: 'gains' has shape"):
            dz.TVLQRControl(**{f: getattr(lqr, f) for f in ("nominal", "knots", "x_nominal", "x_second", "gains",
                                                           "gains_second")} | bad)
