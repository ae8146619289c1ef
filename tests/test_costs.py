"""Each design cost term's value against a closed form, on a prescribed trajectory.

The terms only read the sampled states (and evaluate the control), so a synthetic
trajectory whose integrands are constant in time makes every integral exact on the
trapezoid / Gauss grids: the expected values below are hand-computed numbers. These catch
what gradient-vs-FD checks cannot (those compare a term with itself): a flipped margin
sign, a missing 1/T, a squared norm taken twice, the wrong bound side. Agreement is to
rounding (bound 1e-12 relative).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import design as dz
from rollball_jax.design.costs import FAILED_RESIDUAL
from rollball_jax.design.problem import Evaluation
from conftest import make_paper_ball

T = 2.0
TS = np.linspace(0.0, T, 21)
RTOL = 1e-12


def _evaluation(gc_path, theta_dot=(0.0, 0.0, 0.0), Omega=(0.0, 0.0, 0.0), control=None, q=(1.0, 0.0, 0.0, 0.0)):
    """Paper ball on a prescribed state path: GC at ``gc_path(t)``, constant θ̇, Ω and versor q."""
    ball = make_paper_ball()
    control = rb.ConstantControl(np.zeros(3)) if control is None else control
    xs = jnp.stack([
        ball.initial_state(theta=[0.0, 2.0369, 0.7044], theta_dot=list(theta_dot), Omega=list(Omega),
                           z=list(gc_path(t)), q=list(q))
        for t in TS
    ])
    return Evaluation(ball, control, xs[0], jnp.asarray(TS), xs, ball.observable_context(xs[0]))


def _close(a, b):
    np.testing.assert_allclose(float(a), b, rtol=RTOL, atol=1e-15)


def test_target_gc():
    ev = _evaluation(lambda t: (t, 0.75 * t))  # ends at (2, 1.5)
    term = dz.TargetGC((2.0, 1.0), weight=3.0)
    _close(term.value(ev), 3.0 * 0.5**2)
    _close(term.metrics(ev)["endpoint_error"], 0.5)


def test_track_path_is_a_time_average():
    """A constant offset d from the reference: (1/T)∫|d|² dt = |d|², whatever T and window."""
    ref = lambda t: jnp.stack([0.3 * t, -0.2 * t])  # noqa: E731
    ev = _evaluation(lambda t: (0.3 * t + 0.06, -0.2 * t - 0.08))  # |d| = 0.1
    _close(dz.TrackPath(ref, weight=2.0).value(ev), 2.0 * 0.01)
    windowed = dz.TrackPath(ref, weight=2.0, start=0.5, end=1.5)
    _close(windowed.value(ev), 2.0 * 0.01)
    _close(windowed.metrics(ev)["rms_tracking_error"], 0.1)


def test_control_effort_integrates_u_squared():
    ev = _evaluation(lambda t: (0.0, 0.0), control=rb.ConstantControl([1.0, 2.0, 0.0]))
    _close(dz.ControlEffort(weight=0.5).value(ev), 0.5 * 5.0 * T)
    spline = rb.CubicSplineControl(np.linspace(0.0, T, 5), np.array([[1.0] * 5, [2.0] * 5, [0.0] * 5]))
    ev = _evaluation(lambda t: (0.0, 0.0), control=spline)
    _close(dz.ControlEffort(weight=0.5).metrics(ev)["control_effort"], 5.0 * T)


def test_rail_speed_bound_with_margin():
    """|θ̇| = (0.3, 0.1, 0) against max 0.2 with margin 0.05: excess (0.15, 0, 0) all the time."""
    ev = _evaluation(lambda t: (0.0, 0.0), theta_dot=(0.3, -0.1, 0.0))
    term = dz.RailSpeedBound(0.2, weight=4.0, margin=0.05)
    _close(term.value(ev), 4.0 * 0.15**2 * T)
    _close(term.metrics(ev)["rail_speed_margin"], 0.2 - 0.3)


def test_rail_accel_bound_with_margin():
    ev = _evaluation(lambda t: (0.0, 0.0), control=rb.ConstantControl([1.0, -0.5, 0.0]))
    term = dz.RailAccelBound(0.8, weight=2.0, margin=0.1)
    _close(term.value(ev), 2.0 * 0.3**2 * T)
    _close(term.metrics(ev)["max_rail_accel"], 1.0)


def test_keep_out_disc_penetration_and_margin():
    """GC held at the origin, disc centre (0.3, 0.4) (distance 0.5), radius 0.45, margin 0.1:
    depth 0.05 all the time; clearance +0.05 (outside the true disc)."""
    ev = _evaluation(lambda t: (0.0, 0.0))
    term = dz.KeepOutDiscs([[0.3, 0.4]], [0.45], weight=10.0, margin=0.1)
    _close(term.value(ev), 10.0 * 0.05**2 * T)
    _close(term.metrics(ev)["min_clearance"], 0.05)
    _close(dz.KeepOutDiscs([[0.3, 0.4]], [0.45], weight=10.0, margin=0.0).value(ev), 0.0)


@pytest.mark.parametrize("equilibrium, hold", [(False, False), (True, True)])
def test_final_rest(equilibrium, hold):
    """Identity orientation: ω(T) = Ω; residuals ω, rate_scale·θ̇, (CM − GC)_xy, u(T)."""
    Omega, theta_dot, u = (0.1, -0.2, 0.3), (0.1, 0.0, -0.05), (0.4, 0.0, 0.0)
    ev = _evaluation(lambda t: (0.0, 0.0), theta_dot=theta_dot, Omega=Omega, control=rb.ConstantControl(list(u)))
    term = dz.FinalRest(weight=2.0, equilibrium=equilibrium, hold=hold, rate_scale=3.0)
    expected = np.sum(np.square(Omega)) + 9.0 * np.sum(np.square(theta_dot))
    if equilibrium:
        obs = ev.observables(ev.x_final)
        expected += float(np.sum(np.square(np.asarray(obs["cm_spatial"] - obs["gc"])[:2])))
    if hold:
        expected += float(np.sum(np.square(u)))
    _close(term.value(ev), 2.0 * expected)


def test_final_heading_of_a_body_axis():
    """Versor q = (cos α/2, 0, 0, sin α/2): Λ(T) turns body axes by α about e3, so E1 points
    at α and E2 at α + π/2 (Λ, not Λᵀ: that would give −α). Residual ĥ − (cos ψ, sin ψ):
    value w·(2 − 2 cos(α − ψ)); heading error wrapped to [0, π]."""
    alpha, psi = 2.0, -2.5
    ev = _evaluation(lambda t: (0.0, 0.0), q=(np.cos(alpha / 2), 0.0, 0.0, np.sin(alpha / 2)))
    term = dz.FinalHeading(psi, weight=3.0)
    _close(term.value(ev), 3.0 * (2.0 - 2.0 * np.cos(alpha - psi)))
    _close(term.metrics(ev)["heading_error"], 2.0 * np.pi - (alpha - psi))  # 4.5 rad wraps to 1.78
    side = dz.FinalHeading(alpha + np.pi / 2, axis=(0.0, 1.0, 0.0))
    assert float(side.value(ev)) < 1e-28 and float(side.metrics(ev)["heading_error"]) < 1e-14


def test_continuity_defects_at_the_given_sample_pairs():
    """GC at (t², 0) on the 21-sample grid (Δt = 0.1): the pair (j, j + 1) differs by
    t_j² − t_{j+1}² = −(0.2 t_j + 0.01) in z₁ only: −0.11 at j = 5, −0.25 at j = 12
    (an index off by one would give −0.09, −0.23)."""
    ev = _evaluation(lambda t: (t * t, 0.0))
    term = dz.Continuity((5, 12), weight=7.0)
    _close(term.value(ev), 7.0 * (0.11**2 + 0.25**2))
    _close(term.metrics(ev)["max_defect"], 0.25)
    _close(dz.Continuity((), weight=7.0).value(ev), 0.0)


def _rest_evaluation(ball):
    """``ball`` held at rest at its initial state over [0, T] (contact forces of that state)."""
    x0 = ball.initial_state()
    return Evaluation(ball, rb.ConstantControl(np.zeros(0)), x0, jnp.asarray(TS), jnp.stack([x0] * TS.size),
                      ball.observable_context(x0))


def test_contact_feasibility_normal_and_friction_penalties():
    """Two states whose contact force has a closed form. (i) A shell of mass M, CM below the
    centre, at rest: N = Mg, no friction; with n_min above Mg the penalty is w·(n_min − Mg)²·T.
    (ii) A centred ball of moment of inertia I about every axis, pushed by a horizontal force F
    at its centre while at rest: rolling gives a = F/(M + I/r²) and friction f = I·F/(Mr² + I),
    N = Mg; with μ at half of f/N the penalty is w·(f − μN)²·T."""
    M, r, I, g, F = 2.0, 0.5, 0.3, 9.81, 1.5
    ev = _rest_evaluation(rb.Ball(M, r, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], g, [], []))
    term = dz.ContactFeasibility(n_min=25.0, mu=0.3, weight=2.0)
    _close(term.value(ev), 2.0 * (25.0 - M * g) ** 2 * T)
    metrics = term.metrics(ev)
    _close(metrics["min_normal"], M * g)
    _close(metrics["normal_margin"], M * g - 25.0)
    _close(metrics["friction_margin"], 0.3)  # |F_t| = 0 (to ~1e-150)
    _close(dz.ContactFeasibility(n_min=15.0, weight=2.0).value(ev), 0.0)

    ev = _rest_evaluation(rb.Ball(M, r, [I, I, I], [0.0, 0.0, 0.0], g, [], [], force=rb.ConstantForce([F, 0.0, 0.0])))
    f = I * F / (M * r**2 + I)
    mu = 0.5 * f / (M * g)
    term = dz.ContactFeasibility(n_min=0.0, mu=mu, weight=2.0)
    _close(term.value(ev), 2.0 * (f - mu * M * g) ** 2 * T)
    _close(term.metrics(ev)["max_friction_ratio"], f / (M * g))
    _close(term.metrics(ev)["min_normal"], M * g)


def test_report_equals_the_separate_calls_and_computes_contact_once(monkeypatch):
    """``Cost.report`` = (cost, breakdown, metrics) called one by one, to rounding, with the
    contact forces computed once for every term that uses them (once per trace: counted by
    wrapping ``contact_forces``). A moving, accelerating state path so that every term,
    the contact penalties included, is non-zero."""
    import jax

    import rollball_jax.contact as contact

    ev = _evaluation(lambda t: (0.5 * t, -0.25 * t), theta_dot=(0.3, -0.2, 0.1), Omega=(0.2, 0.1, -0.3),
                     control=rb.ConstantControl([1.5, -2.0, 0.7]))
    cost = dz.Cost(dz.TargetGC((2.0, 1.0), 3.0), dz.FinalRest(2.0), dz.ControlEffort(0.5),
                   dz.RailAccelBound(0.8, weight=2.0), dz.ContactFeasibility(n_min=60.0, mu=0.01, weight=5.0))
    both = jax.jit(lambda e: (cost.report(e), (cost(e), cost.breakdown(e), cost.metrics(e))))  # one compile
    (value, breakdown, metrics), (separate_value, separate, separate_metrics) = both(ev)
    assert float(breakdown["ContactFeasibility"]) > 0.0 and float(breakdown["TargetGC"]) > 0.0
    _close(value, float(separate_value))
    _close(value, sum(float(v) for v in breakdown.values()))
    for name in cost.names:
        _close(breakdown[name], float(separate[name]))
    assert set(metrics) == set(separate_metrics)
    for name, v in separate_metrics.items():
        _close(metrics[name], float(v))
    # a failed solve (non-finite states): the same large finite cost as Cost.__call__
    failed = eqx.tree_at(lambda e: e.xs, ev, ev.xs.at[-1].set(jnp.nan))
    (value, breakdown, _), (separate_value, separate, _) = both(failed)
    assert np.isfinite(float(value)) and float(value) >= 2 * FAILED_RESIDUAL**2  # TargetGC's two at least
    _close(value, float(separate_value))
    assert np.isnan(float(breakdown["TargetGC"])) and np.isnan(float(separate["TargetGC"]))

    calls = []
    original = contact.contact_forces

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(contact, "contact_forces", counting)
    jax.make_jaxpr(lambda e: cost.report(e))(ev)
    assert len(calls) == 1  # calling cost, breakdown and metrics in turn: 3
