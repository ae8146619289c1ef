"""No silent bad input: every kind of invalid design, state, control or setting is refused
with its cause (the error class, and a message naming the parameter / time / mass).

One test per kind; each also checks that the nearest *valid* input is accepted, so a
check that refuses too much fails here as well.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import _checks as checks, batch, config
from rollball_jax.errors import ConfigError, ModelError, SimulationError

from conftest import PAPER_BALL_X0, make_paper_ball, make_paper_disk


@pytest.fixture(scope="module")
def ball():
    return make_paper_ball()


CTL = rb.PaperStep.ball(3)


# ---- 1. versor -------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.1, 1.5, 1.001, 0.0])
def test_non_unit_versor_refused_everywhere(ball, scale):
    x = PAPER_BALL_X0.copy()
    x[6:10] *= scale
    with pytest.raises(ModelError, match=r"versor .*\|q\| = "):
        rb.simulate(ball, CTL, x, (0.0, 1.0))
    with pytest.raises(ModelError, match=r"q of member 1"):
        batch.simulate_batch([ball, ball], CTL, np.stack([PAPER_BALL_X0, x]), (0.0, 1.0), control_axis=None)
    with pytest.raises(ModelError, match="versor"):
        rb.trajectory(ball, CTL, x, jnp.array([0.0, 1.0]))
    with pytest.raises(ModelError, match="versor"):
        rb.design.DesignProblem(ball, x, horizon=1.0)


def test_versor_tolerance_is_the_stated_one(ball):
    """Within VERSOR_TOL (1e-6) a state is accepted (e.g. one a long solve returned)."""
    x = PAPER_BALL_X0.copy()
    x[6:10] *= 1.0 + 0.5 * checks.VERSOR_TOL
    sol = rb.simulate(ball, CTL, x, (0.0, 0.5), n_save=3)
    assert np.all(np.isfinite(sol.xs))
    x[6:10] *= (1.0 + 3.0 * checks.VERSOR_TOL) / (1.0 + 0.5 * checks.VERSOR_TOL)
    with pytest.raises(ModelError, match="unit length"):
        rb.simulate(ball, CTL, x, (0.0, 0.5))
    # the boundary is symmetric: q0 = 1 ± VERSOR_TOL (a central difference with that step)
    # is accepted on both sides (1 − 1e-6 used to be refused by 2.9e-17 of rounding), and
    # 1.01 × VERSOR_TOL off is refused on both
    for dq, ok in ((checks.VERSOR_TOL, True), (-checks.VERSOR_TOL, True), (1.01e-6, False), (-1.01e-6, False)):
        q = np.array([1.0 + dq, 0.0, 0.0, 0.0])
        if ok:
            checks.versor(q, "x0")
        else:
            with pytest.raises(ModelError, match="unit length"):
                checks.versor(q, "x0")


# ---- 2. non-finite values ---------------------------------------------------------------

NAN = float("nan")


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: rb.ConstantControl([NAN, 0.0, 0.0]), "ConstantControl.values"),
        (lambda: rb.PiecewiseLinearControl([0.0, 1.0], [[0.0, NAN]] * 3), "PiecewiseLinearControl.values"),
        (lambda: rb.CubicSplineControl([0.0, 1.0, 2.0], [[0.0, 1.0, float("inf")]]), "CubicSplineControl.values"),
        (lambda: rb.PiecewiseLinearControl([0.0, NAN], [[0.0, 1.0]]), "PiecewiseLinearControl.knots"),
        (lambda: rb.PaperStep.ball(3, amplitude=NAN), "PaperStep"),
        (lambda: rb.FunctionControl(lambda t, p: p * jnp.ones(3), params=jnp.asarray(NAN)), "FunctionControl.params"),
        (lambda: rb.FunctionForce(lambda t, p: p * jnp.ones(3), params=jnp.asarray(NAN)), "FunctionForce.params"),
        (lambda: rb.ConstantForce([0.0, NAN, 0.0]), "ConstantForce.value"),
        (lambda: rb.Disk(1.0, 1.0, 1.0, g=NAN), "'g'"),
        (lambda: rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], g=NAN), "'g'"),
    ],
)
def test_non_finite_values_refused_at_construction(build, name):
    with pytest.raises(ModelError, match=name.replace(".", r"\.")):
        build()


def _ball_with_force(fn, params):
    v = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
    rails = [rb.CircleRail.paper(r, vi) for r, vi in zip([0.95, 0.9, 0.85], v)]
    return rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], rails,
                   force=rb.FunctionForce(fn, params=jnp.asarray(params)))


def _nan_after(t, p):
    return jnp.where(t > p, jnp.nan, 0.0) * jnp.ones(3)


def test_vector_field_turning_non_finite_is_named_with_time_and_component():
    """A force that becomes NaN at t = 2: the cause is the vector field (not 'max_steps'),
    with the time and the state component, in simulate and as a batch member's cause."""
    bad = _ball_with_force(_nan_after, 2.0)
    with pytest.raises(SimulationError, match=r"vector field not finite at t = 2(\.0*\d*)?, in component 10 \('Omega1'\)") as info:
        rb.simulate(bad, CTL, PAPER_BALL_X0, (0.0, 5.0))
    assert info.value.cause == "non-finite vector field"
    assert abs(info.value.t_reached - 2.0) < 1e-6
    good = _ball_with_force(_nan_after, 100.0)
    res = batch.simulate_batch([good, bad], CTL, np.stack([PAPER_BALL_X0] * 2), (0.0, 5.0), control_axis=None)
    assert res.status[0] == 0 and res.status[1] == batch.STATUS_NONFINITE_FIELD
    assert "vector field not finite at t = 2" in res.causes[1] and "Omega1" in res.causes[1]


@pytest.mark.slow
def test_rejected_steps_in_a_row_end_the_solve():
    """Once the field is NaN (t > 2) every step is rejected: the solve ends after
    ``MAX_CONSECUTIVE_REJECTIONS`` of them with diffrax's ``max_steps_rejected`` at t = 2,
    instead of spending ``max_steps`` (it used to take all 100,000: 2.2 s). The same field
    turning NaN only after t1 (t > 100) runs to the end with the same steps as without the
    limit."""
    import diffrax as dfx

    from rollball_jax._rejection_limit import MAX_CONSECUTIVE_REJECTIONS

    ts = jnp.linspace(0.0, 5.0, 6)

    def run(model, limit=True):
        ctrl = rb.solve.stepsize_controller(CTL, jnp.asarray(1e-10), jnp.asarray(1e-10))
        if not limit:
            ctrl = ctrl.controller
        sol = dfx.diffeqsolve(dfx.ODETerm(lambda t, y, args: model.vector_field(t, y, CTL)), dfx.Dopri8(),
                              0.0, 5.0, None, jnp.asarray(PAPER_BALL_X0), saveat=dfx.SaveAt(ts=ts),
                              stepsize_controller=ctrl, max_steps=20_000, throw=False)
        return sol.ys, sol.result == dfx.RESULTS.max_steps_rejected, sol.stats, sol.ts

    good = _ball_with_force(_nan_after, 100.0)
    (ys_a, out_a, st_a, _), (ys_b, out_b, st_b, _) = jax.jit(run)(good), jax.jit(lambda m: run(m, False))(good)
    assert not bool(out_a) and not bool(out_b)
    np.testing.assert_array_equal(ys_a, ys_b)
    assert int(st_a["num_rejected_steps"]) == int(st_b["num_rejected_steps"]) > 0
    bad = _ball_with_force(_nan_after, 2.0)
    ys, rejected_out, stats, _ = jax.jit(run)(bad)
    assert bool(rejected_out)
    # Measured 178 rejections: the steps close in on t = 2 from below (a rejected step
    # across it, an accepted shorter one, 78 rejections in all), then 100 in a row.
    n_rej = int(stats["num_rejected_steps"])
    assert MAX_CONSECUTIVE_REJECTIONS <= n_rej <= 500, n_rej
    np.testing.assert_array_equal(np.isfinite(np.asarray(ys)).all(axis=1), [True, True, True, False, False, False])
    # without the limit the same solve spends all of max_steps
    _, _, stats_b, _ = jax.jit(lambda m: run(m, False))(bad)
    assert int(stats_b["num_steps"]) == 20_000
    # throw=True raises the package's message for it (not diffrax's, which names a setting
    # of its ClipStepSizeController that the package does not use)
    with pytest.raises(Exception, match=r"solve failed: max_steps_rejected: 100 steps in a row were rejected"):
        jax.block_until_ready(rb.integrate(bad, CTL, PAPER_BALL_X0, ts, throw=True).ys)


def _disk_with_force(fn, params):
    return rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)],
                   force=rb.FunctionForce(fn, params=jnp.asarray(params)))


@pytest.mark.slow
def test_batch_group_loops_end_a_member_whose_steps_keep_being_rejected():
    """The package's own group loops stop a member (``Lockstep``) or a group (``Shared``)
    after ``MAX_CONSECUTIVE_REJECTIONS`` rejected steps in a row, as diffrax solves do:
    a force that is NaN after t = 2 used to spend all of ``max_steps`` (100,000 steps,
    ~6 s per call of an 8-member batch of paper balls, measured) and end as
    ``max_steps_reached``. The other members' results are unchanged, bit for bit.
    (Lockstep's own status for the member is not seen here: the check after the solve
    relabels it, naming the field.) A one-mass disk: the loops do not depend on the model,
    and its programs compile in less than half the ball's time (this test: 64 -> 37 s of
    CPU, measured 2026-12-05; the ball's counts were 173 and 191 rejections)."""
    from rollball_jax._rejection_limit import MAX_CONSECUTIVE_REJECTIONS

    good, bad = _disk_with_force(_nan_after, 100.0), _disk_with_force(_nan_after, 2.0)
    ctl = rb.PaperStep.ball(1)
    x0 = np.asarray(good.initial_state(theta=[-1.0]))
    run = lambda models, strategy: batch.simulate_batch(models, ctl, np.stack([x0] * len(models)),
                                                        (0.0, 5.0), control_axis=None, strategy=strategy,
                                                        ts=np.linspace(0.0, 5.0, 6))
    # Lockstep, 16 members on 8 slots: the bad member (first) ends while others wait in
    # the pool, so its slot is refilled with a fresh member, whose counts start at zero
    ref = run([good] * 16, batch.Lockstep(group_size=8))
    res = run([bad] + [good] * 15, batch.Lockstep(group_size=8))
    assert np.all(ref.status == 0) and np.all(res.status[1:] == 0)
    np.testing.assert_array_equal(res.ys[1:], ref.ys[1:])
    np.testing.assert_array_equal(res.num_steps[1:], ref.num_steps[1:])
    np.testing.assert_array_equal(res.num_rejected_steps[1:], ref.num_rejected_steps[1:])
    # the member's own loop ended on the rejections; the check after the solve names the field
    assert res.status[0] == batch.STATUS_NONFINITE_FIELD and "t = 2" in res.causes[0]
    # measured: 170 rejections, ~70 while closing in on t = 2, then 100 in a row (a count
    # that is never reset on acceptance would stop at 100 in all); 211 steps in all
    limit = MAX_CONSECUTIVE_REJECTIONS
    assert limit + 20 <= res.num_rejected_steps[0] <= 500 and res.num_steps[0] <= 1000, res.num_rejected_steps[0]
    np.testing.assert_array_equal(np.isfinite(res.ys[0]).all(axis=1), [True, True, True, False, False, False])
    # Shared, not refined: the whole group stops; its healthy members say why they stopped
    sh = run([good] * 7 + [bad], batch.Shared(refine=False))
    assert sh.status[7] == batch.STATUS_NONFINITE_FIELD
    assert np.all(sh.status[:7] == batch.STATUS_MAX_STEPS_REJECTED)
    assert batch.status_name(batch.STATUS_MAX_STEPS_REJECTED) == "max_steps_rejected"
    # measured: 174 rejections for the group (217 steps)
    assert np.all(sh.num_rejected_steps >= limit + 20) and np.all(sh.num_steps <= 1000), sh.num_rejected_steps
    # the discrete adjoint's recording pass (derivative outputs) stops the same way and says so
    with pytest.raises(Exception, match="100 steps in a row were rejected"):
        jax.block_until_ready(rb.final_gc(bad, ctl, x0, (0.0, 5.0)))
    assert np.all(np.isinf(np.asarray(rb.trajectory(bad, ctl, x0, jnp.array([0.0, 5.0]), throw=False))))


def test_non_finite_field_at_start_fails_fast():
    """A NaN reaching the field through a parameter changed after construction (tree_at):
    refused at t0 without spending max_steps."""
    import equinox as eqx

    ball = _ball_with_force(lambda t, p: p * jnp.ones(3), 0.0)
    ball = eqx.tree_at(lambda b: b.force.params, ball, jnp.asarray(jnp.nan))
    with pytest.raises(SimulationError, match=r"vector field not finite at t = 0") as info:
        rb.simulate(ball, CTL, PAPER_BALL_X0, (0.0, 5.0), max_steps=10**6)
    assert info.value.t_reached == 0.0


# ---- 3. float32 ---------------------------------------------------------------------------


def test_float32_is_detected():
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ModelError, match="float32.*jax_enable_x64"):
            rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0])
        with pytest.raises(ModelError, match="float32"):
            rb.Disk(1.0, 1.0, 1.0)
    finally:
        jax.config.update("jax_enable_x64", True)
    ball = make_paper_ball()
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ModelError, match="float32"):
            rb.simulate(ball, CTL, PAPER_BALL_X0, (0.0, 1.0))
        with pytest.raises(ModelError, match="float32"):
            batch.simulate_batch([ball, ball], CTL, np.stack([PAPER_BALL_X0] * 2), (0.0, 1.0), control_axis=None)
    finally:
        jax.config.update("jax_enable_x64", True)


# ---- 4. a mass leaving the shell ------------------------------------------------------------


def _line_rail_ball():
    line = rb.FunctionRail(lambda th, p: jnp.array([0.1 * th, 0.0, 0.0]))  # open: leaves at θ = 10
    return rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0], [line])


def test_mass_leaving_on_open_rail_is_stopped_with_mass_and_time():
    b = _line_rail_ball()
    x0 = b.initial_state(theta=[1.0], theta_dot=[1.0])  # θ(t) = 1 + t + t²/4: θ = 10 at t ≈ 4.32
    with pytest.raises(SimulationError, match=r"mass 1 is outside the ball") as info:
        rb.simulate(b, rb.ConstantControl([0.5]), x0, (0.0, 100.0))
    assert info.value.cause == "rail left"
    assert 4.0 < info.value.t_reached < 5.0  # stopped at the step that crossed, not at t = 100
    res = batch.simulate_batch([b, b], rb.ConstantControl([0.5]), np.stack([x0, x0]), (0.0, 100.0),
                               control_axis=None)
    assert np.all(res.status == batch.STATUS_RAIL_LEFT) and "outside the shell" in res.causes[0]
    # the same rail with a motion that stays inside is fine
    sol = rb.simulate(b, rb.ConstantControl([0.0]), b.initial_state(theta=[1.0], theta_dot=[0.5]), (0.0, 10.0))
    assert np.max(np.abs(sol.theta)) < 10.0


def test_rail_poking_out_between_samples_is_refused():
    """A circle whose furthest point is 5e-10 outside the shell, between the sample points."""
    eps = 1e-9
    with pytest.raises(ModelError, match="rail of mass 1 reaches"):
        rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[1.0], rails=[rb.CircleRail(0.5, center=[0.5 + eps / 2, 0.0, 0.0])])
    shifted = rb.FunctionRail(lambda th, p: jnp.array([0.5 * jnp.cos(th + 1e-4) + 0.5 + 6e-10, 0.0, 0.5 * jnp.sin(th + 1e-4)]))
    assert shifted.max_distance()[0] - 1.0 == pytest.approx(6e-10, abs=1e-13)
    with pytest.raises(ModelError, match="rail of mass 1 reaches"):
        rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[1.0], rails=[shifted])
    # 5e-10 inside is accepted
    rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[1.0], rails=[rb.CircleRail(0.5, center=[0.5 - eps / 2, 0.0, 0.0])])


def test_initial_state_outside_the_shell_is_refused():
    b = _line_rail_ball()
    with pytest.raises(ModelError, match="mass 1 is outside the ball"):
        rb.simulate(b, rb.ConstantControl([0.0]), b.initial_state(theta=[12.0]), (0.0, 1.0))


# ---- 5. settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(rtol=-1.0, atol=-1.0), "'rtol'"),
        (dict(atol=0.0), "'atol'"),
        (dict(rtol=NAN), "'rtol'"),
        (dict(max_steps=0), "'max_steps'"),
        (dict(max_steps=1.5), "'max_steps'"),
        (dict(n_save=0), "'n_save'"),
        (dict(dt0=-0.1), "'dt0'"),
        (dict(ts=[0.0, NAN]), "'ts'"),
    ],
)
def test_bad_settings_name_the_argument(ball, kwargs, name, unchecked_types):
    with pytest.raises(ModelError, match=name):
        rb.simulate(ball, CTL, PAPER_BALL_X0, (0.0, 1.0), **kwargs)


def test_bad_control_and_force_name_the_argument(ball, unchecked_types):
    with pytest.raises(ModelError, match="'control' must be a rollball_jax control"):
        rb.simulate(ball, None, PAPER_BALL_X0, (0.0, 1.0))
    with pytest.raises(ModelError, match="'control' must be"):
        rb.trajectory(ball, lambda t: jnp.zeros(3), PAPER_BALL_X0, jnp.array([0.0, 1.0]))
    with pytest.raises(ModelError, match=r"shape \(3,\); got shape \(2,\)"):
        rb.FunctionForce(lambda t, p: jnp.zeros(2))
    with pytest.raises(ModelError, match="'max_steps'"):
        batch.simulate_batch([ball, ball], CTL, np.stack([PAPER_BALL_X0] * 2), (0.0, 1.0), control_axis=None, max_steps=0)
    with pytest.raises(ModelError, match="'rtol'"):
        rb.final_gc(ball, CTL, PAPER_BALL_X0, (0.0, 1.0), rtol=-1.0)


def test_derivative_functions_refuse_bad_times_and_state_shapes_also_under_transformations(ball, unchecked_types):
    """The derivative functions refuse decreasing or repeated times with the package's
    message (a decreasing ``t_span`` used to reach the solve and fail there with "a save
    time was passed over ..."), and a state of the wrong length also under ``jax.grad``
    and ``jax.jit``, where the value checks are skipped but the shape is known (it used to
    surface as JAX's "cond branches must have equal output types"), and a control for
    another number of masses (JAX's broadcasting error before). Nothing is compiled:
    every case is refused while tracing."""
    x0 = jnp.asarray(PAPER_BALL_X0)
    with pytest.raises(ModelError, match=r"'t_span' must be finite and strictly increasing .*\[1\.0, 0\.0\]"):
        rb.final_gc(ball, CTL, x0, (1.0, 0.0))
    with pytest.raises(ModelError, match=r"'t_span' must be finite and strictly increasing"):
        rb.running_cost(ball, CTL, x0, (1.0, 1.0), lambda t, x: t)
    with pytest.raises(ModelError, match=r"'ts' must be finite and strictly increasing"):
        rb.trajectory(ball, CTL, x0, jnp.array([0.0, 1.0, 1.0]))
    with pytest.raises(ModelError, match=r"'ts' must be a 1-d sequence of at least two times"):
        rb.trajectory(ball, CTL, x0, jnp.array([1.0]))
    with pytest.raises(ModelError, match=r"'t_span' must be \(t0, t1\)"):
        rb.final_state(ball, CTL, x0, (0.0, 1.0, 2.0))
    for transform in (jax.grad, jax.jit):
        with pytest.raises(ModelError, match=r"'x0' must have length 15 \(theta1, .*\); got 14"):
            transform(lambda x: rb.final_gc(ball, CTL, x, (0.0, 1.0))[0])(x0[:14])
    with pytest.raises(ModelError, match=r"'x0' must have length 15 .*; got shape \(1, 15\)"):
        jax.jit(lambda x: rb.final_state(ball, CTL, x, (0.0, 1.0)))(x0[None])
    with pytest.raises(ModelError, match=r"'target' must be a horizontal position \(x, y\)"):
        rb.distance_to_target(ball, CTL, x0, (0.0, 1.0), [1.0, 2.0, 3.0])
    # a control for another number of masses, in every derivative function and adjoint, also
    # under jax.jit (it surfaced as JAX's "mul got incompatible shapes for broadcasting")
    two = rb.ConstantControl([0.0, 0.0])
    for call in (lambda x: rb.final_gc(ball, two, x, (0.0, 1.0)),
                 lambda x: rb.trajectory(ball, two, x, jnp.array([0.0, 0.5, 1.0]), adjoint="backsolve"),
                 lambda x: rb.running_cost(ball, two, x, (0.0, 1.0), lambda t, x: t),
                 jax.jit(lambda x: rb.state_transition_matrix(ball, two, x, (0.0, 1.0)))):
        with pytest.raises(ModelError, match=r"control returns u of shape \(2,\) but the model has 3 masses"):
            call(x0)
    # times given as a tuple holding a traced time (as the README writes spans) are accepted
    # by every derivative function (traced only: eval_shape compiles nothing); the first
    # version of the checks above converted such a tuple with NumPy and raised JAX's
    # TracerArrayConversionError in rb.trajectory and rb.running_cost
    for f in (lambda t1: rb.trajectory(ball, CTL, x0, (0.0, 0.5, t1))[-1, 13],
              lambda t1: rb.final_gc(ball, CTL, x0, (0.0, t1))[0],
              lambda t1: rb.running_cost(ball, CTL, x0, (0.0, t1), lambda t, x: x[13] ** 2)):
        assert jax.eval_shape(jax.grad(f), 1.0).shape == ()


def test_control_for_another_number_of_masses_is_refused_everywhere():
    """The vector fields check the control's output shape while they are traced (free at
    run time), so every route refuses it with one message: an empty control was taken for
    u = 0 by the field, the Jacobians and the contact force (silently), and the solves
    raised JAX's broadcasting or "cond branches" errors (found by a fresh-user trial).
    Nothing is compiled: each case is refused while tracing."""
    from rollball_jax import design as dz

    disk = rb.Disk(1.0, 1.0, 0.5, masses=[1.0, 1.0], rails=[rb.CircleRail([0.5, 0.3])])
    x = disk.initial_state(theta=[0.3, 0.1], theta_dot=[0.5, 0.2])
    for size in (0, 1, 3):
        ctl = rb.ConstantControl(np.zeros(size))
        for call in (lambda: disk.vector_field(0.0, x, ctl),
                     lambda: rb.jacobians.state_jacobian(disk, ctl, 0.0, x),
                     lambda: rb.contact_forces(disk, ctl, jnp.zeros(1), x[None]),
                     lambda: dz.linearisation(disk, ctl, 0.0, x),
                     lambda: rb.integrate(disk, ctl, x, jnp.array([0.0, 1.0])),
                     lambda: rb.simulate(disk, ctl, x, (0.0, 1.0)),
                     lambda: rb.scipy_bridge.solve_with_scipy(disk, ctl, x, (0.0, 1.0)),
                     lambda: batch.simulate_batch([disk, disk], ctl, np.stack([x, x]), (0.0, 1.0), control_axis=None)):
            with pytest.raises(ModelError, match=rf"control returns u of shape \({size},?\) but the model has 2 masses"):
                call()


# ---- 6. the README's own example --------------------------------------------------------------


def test_submodules_reachable_from_the_package():
    assert rb.batch.simulate_batch is batch.simulate_batch
    assert callable(rb.config.load_config) and callable(rb.design.DesignProblem)
    with pytest.raises(AttributeError, match="no attribute 'batchh'"):
        rb.batchh  # noqa: B018


# ---- 7. config typos -----------------------------------------------------------------------------


def test_config_typo_of_required_key_is_named():
    with pytest.raises(ConfigError, match=r"model\.radius: required key is missing .*'model\.radious'.*did you mean 'radius'"):
        config.build_from_mapping({"model": {"type": "ball", "m0": 1.0, "radious": 1.0, "inertia": [1, 1, 1]},
                                   "time": {"t1": 1.0}})


# ---- 8. what is documented holds -----------------------------------------------------------------


def _circle_xz(th, p):
    return p["r"] * jnp.array([jnp.cos(th), 0.3 * jnp.sin(th), jnp.sin(th)])


@pytest.mark.slow
def test_adaptive_batch_agrees_with_single_solves_within_documented_bound():
    """docs/batch.md: mode 'adaptive' agrees with single solves to within 100·tol (not to
    rounding). Mixed rails, spline control, random F_e; measured max 3.3e-9 at tol 1e-8
    over 64 such designs."""
    rng = np.random.default_rng(1)
    tol = 1e-8
    models, ctls, x0s = [], [], []
    for _ in range(6):
        rails = [rb.CircleRail(rng.uniform(0.3, 0.9)), rb.EllipseRail(rng.uniform(0.3, 0.8), rng.uniform(0.2, 0.5)),
                 rb.FigureEightRail(rng.uniform(0.3, 0.8), rng.uniform(0.2, 0.5)),
                 rb.FunctionRail(_circle_xz, {"r": jnp.asarray(rng.uniform(0.3, 0.7))})]
        m = rb.Ball(1.0, 1.0, rng.uniform(0.6, 1.0, 3), [0, 0, -0.05], 1.0, rng.uniform(0.2, 1.0, 4), rails,
                    force=rb.ConstantForce(rng.normal(size=3) * 0.1))
        models.append(m)
        ctls.append(rb.CubicSplineControl([0, 2, 4, 6, 8, 10], rng.uniform(-1, 1, (4, 6))))
        x0s.append(np.asarray(m.initial_state(theta=rng.uniform(0, 6, 4))))
    ts = np.linspace(0.0, 10.0, 11)
    res = batch.simulate_batch(models, ctls, np.stack(x0s), (0.0, 10.0), ts=ts, rtol=tol, atol=tol)
    assert np.all(res.ok)
    for i in range(len(models)):
        sol = rb.simulate(models[i], ctls[i], x0s[i], (0.0, 10.0), ts=ts, rtol=tol, atol=tol)
        assert np.max(np.abs(sol.xs - res.ys[i])) <= 100 * tol


@pytest.mark.parametrize("build, needle", [
    (lambda: rb.Disk(1.0, 1.0, 1.0, masses=[-1.0], rails=[rb.CircleRail(0.9)]), "'masses' must be positive"),
    (lambda: rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(1.5)]), "rail of mass 1 reaches"),
    (lambda: rb.Disk(1.0, -1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.5)]), "radius"),
    (lambda: rb.CubicSplineControl([0.0, 1.0, 0.5], np.zeros((1, 3))), "strictly increasing"),
    (lambda: rb.PaperStep([1.0], t_a=0.3, t_b=0.2), "t_a < t_b"),
])
def test_concrete_bad_input_is_refused_inside_jit(build, needle):
    """A model built inside a ``jit`` from concrete (closed-over) data is concrete and keeps
    its checks: construction converts concrete data at trace time (``errors.to_device``),
    so a negative mass or a rail outside the shell is not silently traced through."""
    with pytest.raises(ModelError, match=needle):
        jax.jit(lambda x: (build(), x)[1])(1.0)


def test_host_only_functions_under_a_transformation_name_the_traceable_ones(ball):
    """``rb.simulate`` and ``simulate_batch`` check their inputs on the host and return NumPy
    arrays; under ``jax.jit``/``jax.grad``/``jax.vmap`` JAX's own TracerArrayConversionError
    named neither them nor an alternative. Refused while tracing, before any compile."""
    x0 = jnp.asarray(PAPER_BALL_X0)
    for transform in (jax.jit, jax.grad, jax.vmap):
        arg = x0[None] if transform is jax.vmap else x0
        with pytest.raises(rb.NotTraceableError, match=r"rb\.simulate .*use rb\.integrate .*rb\.final_state"):
            transform(lambda x: rb.simulate(ball, CTL, x, (0.0, 1.0)).xs[-1, 0])(arg)
    with pytest.raises(rb.NotTraceableError, match=r"simulate_batch .*it batches itself"):
        jax.grad(lambda x: rb.batch.simulate_batch([ball], CTL, x[None], (0.0, 1.0), control_axis=None).ys[0, -1, 0])(x0)


def test_simulate_and_initial_states_refuse_ill_shaped_arguments(unchecked_types):
    """Found by a fresh-user trial, each accepted silently before: a 2-d x0 (flattened), a
    third time in t_span (ignored; a number raised a TypeError), a NaN z_a (NaN GC
    positions), z_a for a ball (ignored), a disk's phi of two values (a state one too long),
    theta for a ball without masses (dropped). Nothing is compiled: each is refused before
    the solve."""
    ball, disk = make_paper_ball(), make_paper_disk()
    ctl = rb.PaperStep.ball(3)
    for kw, match in ((dict(x0=PAPER_BALL_X0.reshape(3, 5)), r"'x0' must be a state vector of length 15; got shape \(3, 5\)"),
                      (dict(t_span=(0.0, 1.0, 2.0)), r"'t_span' must be \(t0, t1\); got \(0.0, 1.0, 2.0\)"),
                      (dict(t_span=5.0), r"'t_span' must be \(t0, t1\); got 5.0"),
                      (dict(z_a=float("nan")), "'z_a' must be finite"),
                      (dict(z_a=1.0), "'z_a' .* is for a Disk; a Ball's position is part of its state x0")):
        args = dict(x0=PAPER_BALL_X0, t_span=(0.0, 1.0)) | kw
        with pytest.raises(ModelError, match=match):
            rb.simulate(ball, ctl, args.pop("x0"), args.pop("t_span"), **args)
    with pytest.raises(ModelError, match="initial 'phi' must be a number .*; got 2 values"):
        disk.initial_state(phi=[0.1, 0.2])
    with pytest.raises(ModelError, match="initial 'phi_dot' must be a number .*; got 4 values"):
        disk.initial_state(phi_dot=np.ones((2, 2)))
    np.testing.assert_array_equal(disk.initial_state(phi=0.3, phi_dot=-0.1)[8:], [0.3, -0.1])
    shell = rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0])
    with pytest.raises(ModelError, match=r"initial 'theta' must have shape \(0,\); got \(2,\)"):
        shell.initial_state(theta=[1.0, 2.0])
    assert shell.initial_state().shape == (9,)


def test_user_functions_periods_and_solvers_are_checked_when_given(unchecked_types):
    """A user's function that does not trace with JAX is refused when its rail or control is
    built, naming it (FunctionRail raised JAX's ConcretizationTypeError there, FunctionControl
    only inside the first solve); a FunctionRail's period must be finite and increasing (NaN
    gave "rail reaches |ζ(θ)| = nan", a reversed one was accepted), batched params need one
    leading axis (an IndexError); a fixed-step solver and a plain function as the SciPy
    bridge's control get the package's message. Found by a fresh-user trial; nothing is
    compiled."""
    import diffrax as dfx

    circle = lambda th, p: jnp.array([0.5 * jnp.cos(th), 0.0, 0.5 * jnp.sin(th)])  # noqa: E731
    for kw, match in ((dict(period=(0.0, np.nan)), r"'FunctionRail period\[1\]' must be finite; got nan"),
                      (dict(period=(5.0, 0.0)), r"'period' must satisfy θ_lo < θ_hi; got \(5.0, 0.0\)"),
                      (dict(period=5.0), r"'period' must be \(θ_lo, θ_hi\)"),
                      (dict(period=(1.0, 1.0)), r"'period' must satisfy θ_lo < θ_hi; got \(1.0, 1.0\)"),
                      (dict(period=(0.0, 1.0, 2.0)), r"'period' must be \(θ_lo, θ_hi\)"),
                      (dict(params={"a": 1.0}, batched=True), r"batched=True: every leaf .* got shapes \[\(\)\]"),
                      (dict(params={"a": np.ones(2), "b": np.ones(3)}, batched=True), r"got shapes \[\(2,\), \(3,\)\]")):
        with pytest.raises(ModelError, match=match):
            rb.FunctionRail(circle, **kw)
    with pytest.raises(ModelError, match="FunctionRail 'fn' failed when called as fn\\(theta, params\\).*ConcretizationTypeError"):
        rb.FunctionRail(lambda th, p: np.array([float(th), 0.0, 0.0]))
    with pytest.raises(ModelError, match="FunctionControl 'fn' failed when called as fn\\(t, params\\): TypeError"):
        rb.FunctionControl(lambda t: jnp.ones(3))
    with pytest.raises(ModelError, match=r"FunctionControl 'fn' must return .* shape \(n,\); got shape \(2, 2\)"):
        rb.FunctionControl(lambda t, p: jnp.ones((2, 2)))
    # non-array parameters (a string, a flag, a size) stay static, as in the solves (the first
    # version of the check traced them and refused these; found by a code review)
    for params in ({"a": 0.2, "kind": "sin"}, {"a": 0.2, "kind": "sin", "smooth": True, "n": 3}):
        ctl = rb.FunctionControl(lambda t, p: p["a"] * (jnp.sin(t) if p["kind"] == "sin" else jnp.cos(t)) * jnp.ones(3),
                                 params)
        np.testing.assert_allclose(np.asarray(ctl(0.5)), 0.2 * np.sin(0.5) * np.ones(3), rtol=1e-15)
    with pytest.raises(ModelError, match=r"FunctionRail fn must return an array of shape \(3,\)"):
        rb.FunctionRail(lambda th, p: (0.5 * jnp.cos(th), 0.0 * th, 0.5 * jnp.sin(th)))  # a tuple
    ball = make_paper_ball()
    with pytest.raises(ModelError, match="'solver' must be an adaptive diffrax solver.*got Euler"):
        rb.simulate(ball, CTL, PAPER_BALL_X0, (0.0, 1.0), solver=dfx.Euler(), dt0=1e-3)
    with pytest.raises(ModelError, match="'control' must be a rollball_jax control"):
        rb.scipy_bridge.solve_with_scipy(ball, lambda t: np.zeros(3), PAPER_BALL_X0, (0.0, 1.0))


def test_model_parameters_that_are_not_numbers_are_named(unchecked_types):
    """Text or objects as a model parameter get the package's message naming it (NumPy's
    "could not convert string to float: 'a'" before; a numeric string was converted, which
    the rails already refused). Found by a fresh-user trial; nothing is compiled."""
    base = dict(m0=1.0, radius=1.0, inertia=[1.0, 1.0, 1.0], masses=[1.0], rails=[rb.CircleRail(0.5)])
    for kw, name in ((dict(masses=["a"]), "masses"), (dict(m0="1.0"), "m0"), (dict(inertia=["x", 1, 1]), "inertia"),
                     (dict(chi0=[None, 0.0, 0.0]), "chi0"), (dict(radius=object()), "radius")):
        with pytest.raises(ModelError, match=f"'{name}' must be numeric; got"):
            rb.Ball(**(base | kw))
    # any real JAX/NumPy number type is numeric (bfloat16's dtype kind is 'V'; code review)
    assert float(rb.Ball(**(base | dict(m0=jnp.array(2.0, dtype=jnp.bfloat16)))).m0) == 2.0
    with pytest.raises(ModelError, match="'chi0' must be numeric"):
        rb.Disk(1.0, 1.0, 1.0, chi0=["a", 0.0])


def test_complex_inputs_are_refused():
    """A complex step through a solve lost its imaginary part in the cast to float64 (only a
    NumPy ComplexWarning; the "derivative" came out 0; found by a break-it trial): complex
    states and parameters are refused, naming the routes that work. Nothing is compiled."""
    ball = make_paper_ball()
    x = PAPER_BALL_X0 + 1j * 1e-20 * np.eye(15)[3]
    for call in (lambda: rb.final_state(ball, CTL, x, (0.0, 1.0)), lambda: rb.final_gc(ball, CTL, x, (0.0, 1.0)),
                 lambda: rb.simulate(ball, CTL, x, (0.0, 1.0)), lambda: rb.integrate(ball, CTL, x, jnp.array([0.0, 1.0])),
                 lambda: rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[1.0 + 1e-20j], rails=[rb.CircleRail(0.5)])):
        with pytest.raises(ModelError, match="complex values are not supported.*complex_step_jacobian"):
            call()
