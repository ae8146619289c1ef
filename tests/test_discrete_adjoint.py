"""Derivatives you can trust (issue 9): the discrete adjoint at long horizons, at rest,
second order, refused adjoints and knot times.

Each test asserts a value against an independent route: forward vs reverse mode of the
same discrete map (must agree to rounding amplified by the sensitivity), central finite
differences of the primal solve, or a closed form (linearised pendulum).
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import PAPER_BALL_X0, PAPER_DISK_X0, make_paper_ball, make_paper_disk

TOL = 1e-10


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# --------------------------------------------------------------------------------------
# failing input 1: reverse mode at long horizons


@pytest.fixture(scope="module")
def ball_gc1():
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)

    def gc1(x0, t1):
        return rb.final_gc(ball, ctl, x0, (0.0, t1), rtol=TOL, atol=TOL)[0]

    def gc1_and_state(x0, t1):  # GC₁(t1) and, as auxiliary output, x(t1) of the same solve
        x1 = rb.final_state(ball, ctl, x0, (0.0, t1), rtol=TOL, atol=TOL)
        return rb.sensitivity.gc_position(ball, x1, x0, 0.0)[0], x1

    # t1 is traced: one compilation serves every horizon. Derivatives w.r.t. (x0, t1), with
    # the state x(t1) of the solve they differentiate (a separate solve is another program,
    # whose steps can differ: the tangent bound's difference J·u rounds with the program).
    return (jax.jit(gc1), jax.jit(jax.grad(gc1_and_state, argnums=(0, 1), has_aux=True)),
            jax.jit(jax.jacfwd(gc1_and_state, argnums=(0, 1), has_aux=True)))


@pytest.mark.parametrize("t1", [20.0, 100.0, 200.0])
def test_reverse_equals_forward_at_long_horizons(ball_gc1, t1):
    """∂GC₁(t1)/∂x(0), paper ball: reverse mode (jax.grad) = forward mode (jax.jvp per
    component) to 1e-8 relative at t1 = 20, 100 and 200 (diffrax's checkpointed
    reverse mode was 0.97 off at t1 = 200). Measured: ≤ 4e-13. ∂GC₁(t1)/∂t1 (through the
    save-time identity, ``_time_tangents``; it was 0) is the GC velocity, the GC₁ component
    of the vector field at x(t1), in both modes (measured equal to rounding)."""
    _, grad, jac_fwd = ball_gc1
    x0 = jnp.asarray(PAPER_BALL_X0)
    (g_rev, t_rev), x_rev = grad(x0, jnp.asarray(t1))
    (g_fwd, t_fwd), x_fwd = jac_fwd(x0, jnp.asarray(t1))
    assert rel(g_rev, g_fwd) < 1e-8
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    velocity = jax.jit(lambda t, x: ball.vector_field(t, x, ctl)[13])  # GC₁ = x[2n + 7]
    v_rev, v_fwd = velocity(jnp.asarray(t1), x_rev), velocity(jnp.asarray(t1), x_fwd)
    assert abs(float(v_rev)) > 1e-3
    assert abs(float(t_rev) - float(v_rev)) <= 1e-12 and abs(float(t_fwd) - float(v_fwd)) <= 1e-12


@pytest.mark.slow
def test_integrate_is_forward_mode_exact_at_long_horizons_and_refuses_reverse_mode(ball_gc1):
    """``rb.integrate``'s default adjoint is ``diffrax.ForwardMode``. Its forward-mode
    ∂GC₁(200)/∂Ω₁(0) on the paper ball (169 207: a sensitivity of ~1e5) equals the
    discrete adjoint's reverse gradient (``rb.final_gc``, on its own derivative-aware
    steps: two discretisations at tol 1e-10) to 3.3e-8 relative, measured with the
    default tangent bound (2.0e-7 with the carried tangent); bound 2e-6.
    Reverse mode through it raises, naming the routes that work: with diffrax's
    ``RecursiveCheckpointAdjoint`` (its default adjoint until 2026-12-07) ``jax.grad`` gave
    −916 029 here, silently (the checkpointed recomputation re-decides steps); that
    adjoint and ``DirectAdjoint`` are refused. A failed solve's forward-mode derivative
    with ``throw=False`` is NaN."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    x0 = jnp.asarray(PAPER_BALL_X0)
    e_omega1 = jnp.zeros(15).at[10].set(1.0)  # Ω₁ (state: θ, θ̇, q, Ω, GC)

    def gc1(x, **kw):
        return rb.integrate(ball, ctl, x, jnp.array([0.0, 200.0]), rtol=TOL, atol=TOL, **kw).ys[1][0, 13]

    forward = float(jax.jit(lambda x: jax.jvp(gc1, (x,), (e_omega1,))[1])(x0))
    reverse = float(ball_gc1[1](x0, jnp.asarray(200.0))[0][0][10])
    assert abs(reverse) > 1e5 and abs(forward - reverse) <= 2e-6 * abs(reverse), (forward, reverse)
    with pytest.raises(RuntimeError, match=r"forward mode only.*rb\.trajectory, rb\.final_state or rb\.final_gc"):
        jax.grad(gc1)(x0)
    for adjoint in (dfx.RecursiveCheckpointAdjoint(), dfx.DirectAdjoint()):
        with pytest.raises(ValueError, match=f"{type(adjoint).__name__} is refused: .*rb.final_state"):
            gc1(x0, adjoint=adjoint)

    def short(x, throw):
        return rb.integrate(ball, ctl, x, jnp.array([0.0, 2.0]), max_steps=5, throw=throw).ys[1][0, 13]

    assert np.all(np.isnan(jax.jacfwd(short)(x0, False)))


@pytest.mark.slow
def test_integrate_forward_mode_time_derivatives_follow_the_ode():
    """Forward mode through ``rb.integrate`` (diffrax's own, not the discrete adjoint's
    time identities) w.r.t. its start and end times, paper ball over [0, 5] at tol 1e-10:
    ∂x(t1)/∂t1 = f(t1, x(t1)) and ∂x(t1)/∂t0 = −Φ f(t0, x0), with Φ = ∂x(t1)/∂x0 from the
    same program. Measured 1.8e-10 and 1.9e-9 relative (diffrax differentiates the last
    step's length and the first step's start; a dropped time tangent gives 1, a sign 2);
    bounds 1e-8 and 2e-8."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    x0 = jnp.asarray(PAPER_BALL_X0)

    def end_state(x, t0, t1):
        return rb.integrate(ball, ctl, x, jnp.stack([t0, t1]), rtol=TOL, atol=TOL).ys[1][-1]

    t0, t1 = jnp.asarray(0.0), jnp.asarray(5.0)
    x1, (phi, d_t0, d_t1) = jax.jit(lambda *a: (end_state(*a), jax.jacfwd(end_state, argnums=(0, 1, 2))(*a)))(x0, t0, t1)
    f1, f0 = ball.vector_field(t1, x1, ctl), ball.vector_field(t0, x0, ctl)
    assert rel(d_t1, f1) <= 1e-8
    assert rel(d_t0, -phi @ f0) <= 2e-8


def test_long_horizon_gradient_matches_finite_differences(ball_gc1):
    """∂GC₁(200)/∂Ω₁(0) ≈ 1.69e5 (issue: forward 169 207, FD 169 031 good to ~1e-3).

    FD: central differences of the primal at rtol = atol = 1e-12, h = 1e-7 and 2e-7;
    the motion amplifies perturbations ~1e6, so the FD is only good to its own
    spread: we assert agreement to 5e-3 relative (10× the FD spread measured, ~2e-4).
    """
    _, grad, _ = ball_gc1
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    x0 = jnp.asarray(PAPER_BALL_X0)
    g = float(grad(x0, jnp.asarray(200.0))[0][0][10])  # Ω₁ = x[2n + 4]
    tight = jax.jit(lambda x: rb.final_gc(ball, ctl, x, (0.0, 200.0), rtol=1e-12, atol=1e-12)[0])

    def fd(h):
        e = jnp.zeros(15).at[10].set(h)
        return (float(tight(x0 + e)) - float(tight(x0 - e))) / (2 * h)

    d1, d2 = fd(1e-7), fd(2e-7)
    assert 1.5e5 < g < 1.9e5
    assert abs(g - d1) / abs(d1) < 5e-3
    assert abs(d1 - d2) / abs(d1) < 5e-3


# --------------------------------------------------------------------------------------
# failing input 2: derivatives from an equilibrium


def _hanging_disk():
    disk = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)])
    x0 = jnp.asarray(disk.initial_state(theta=[-np.pi / 2]))
    # linearised pendulum: ω² = m₁ g r₁ / (d² + m₀ r² + m₁ (r − r₁)²)
    omega = np.sqrt(1.0 * 1.0 * 0.9 / (1.0 + 1.0 + 1.0 * 0.1**2))
    return disk, x0, omega


def test_equilibrium_stm_matches_linearised_pendulum():
    """Disk at rest, mass hanging: ∂φ(T)/∂φ̇(0) = sin(ωT)/ω (the issue: 20.0037 was
    returned for 1.0892). With the default derivative-aware step control (the tangent
    bound; the carried tangent is checked in
    ``test_tangent_bound_and_carried_tangent_resolve_the_equilibrium``), measured 1.0e-10
    relative; without it the steps grow to the whole interval and the value is O(1) wrong
    (asserted, to show the mechanism)."""
    disk, x0, omega = _hanging_disk()
    ctl = rb.ConstantControl([0.0])
    ts = jnp.array([0.0, 5.0, 20.0])
    stm = rb.state_transition_matrix(disk, ctl, x0, ts, rtol=TOL, atol=TOL)
    for k, T in enumerate([0.0, 5.0, 20.0]):
        expect = np.sin(omega * T) / omega if T else 0.0
        assert abs(float(stm[k, 2, 3]) - expect) <= 1e-6 * max(abs(expect), 1e-3)
        # ∂φ̇/∂φ̇ = cos(ωT)
        assert abs(float(stm[k, 3, 3]) - np.cos(omega * T)) <= 1e-6
    # the default is the tangent bound (the same compiled solve: bit for bit)
    assert np.array_equal(stm, rb.state_transition_matrix(disk, ctl, x0, ts, rtol=TOL, atol=TOL, tangent_control="bound"))
    # The same rest after 10⁵ turns (φ = 2π·10⁵, read by the field through sin/cos): the
    # bound's difference step is scaled by the median component, not the largest (with the
    # largest, ε ≈ 6 spanned the nonlinearity and ∂φ(20)/∂φ̇(0) was 7.0e-6 off, silently;
    # found by a break-it trial). Measured 1.0e-10 as at φ = 0.
    turned = jnp.asarray(disk.initial_state(theta=[-np.pi / 2], phi=2e5 * np.pi))
    far = rb.state_transition_matrix(disk, ctl, turned, ts, rtol=TOL, atol=TOL)
    assert abs(float(far[-1, 2, 3]) - np.sin(omega * 20.0) / omega) <= 1e-6 * abs(np.sin(omega * 20.0) / omega)
    blind = rb.state_transition_matrix(disk, ctl, x0, ts, rtol=TOL, atol=TOL, tangent_control=False)
    assert abs(float(blind[-1, 2, 3]) - np.sin(omega * 20.0) / omega) > 0.1
    # forward mode through rb.integrate differentiates diffrax's steps, as blind (documented
    # in its docstring, the README and docs/derivatives.md: 20.0037 measured)
    via = jax.jit(jax.jacfwd(lambda x: rb.integrate(disk, ctl, x, jnp.array([0.0, 20.0]), rtol=TOL, atol=TOL).ys[0][-1]))(x0)
    assert abs(float(via[2, 3]) - np.sin(omega * 20.0) / omega) > 0.1


@pytest.mark.slow
def test_equilibrium_running_cost_gradient_matches_linearised_pendulum():
    """Same disk at rest: d/dφ̇(0) of ∫₀ᵀ φ dt is ∫₀ᵀ sin(ωt)/ω dt = (1 − cos ωT)/ω² (T = 20),
    by reverse mode through ``running_cost`` with its default (derivative-aware) step control.
    Measured 6.7e-9 relative (bound 1e-6, as for the state transition matrix); with
    ``tangent_control=False`` it is 36.3 instead of 0.704."""
    disk, x0, omega = _hanging_disk()
    ctl = rb.ConstantControl([0.0])

    def cost(x, t1=20.0, **kw):  # the default step control unless kw says otherwise
        return rb.running_cost(disk, ctl, x, jnp.stack([0.0, t1]), lambda t, y: y[2], rtol=TOL, atol=TOL, **kw)

    expect = (1.0 - np.cos(omega * 20.0)) / omega**2
    assert float(cost(x0)) == pytest.approx(20.0 * float(x0[2]), rel=1e-12)  # at rest: φ(t) = φ(0)
    d_x0, d_t1 = jax.grad(cost, argnums=(0, 1))(x0, 20.0)
    assert abs(float(d_x0[3]) - expect) <= 1e-6 * abs(expect)
    # d/dT ∫₀ᵀ φ dt = φ(T) = φ(0) at rest (through the save-time identity; it was 0)
    assert float(d_t1) == pytest.approx(float(x0[2]), rel=1e-12)
    # the default is the tangent bound (the same compiled solve: bit for bit)
    assert np.array_equal(d_x0, jax.grad(lambda x: cost(x, tangent_control="bound"))(x0))
    blind = jax.grad(lambda x: cost(x, tangent_control=False))(x0)
    assert abs(float(blind[3]) - expect) > 0.1 * abs(expect)


def test_zero_initialised_spline_design_gradient_matches_fd():
    """Gradient w.r.t. spline knot values at the all-zero first guess (system at rest):
    reverse mode vs Richardson central differences ≤ 1e-6 relative (measured ~1e-9)."""
    disk, x0, _ = _hanging_disk()
    knots = jnp.linspace(0.0, 10.0, 6)

    def cost(values):
        ctl = rb.CubicSplineControl(knots, values.reshape(1, -1))
        x = rb.final_state(disk, ctl, x0, (0.0, 10.0), rtol=1e-12, atol=1e-12)
        return x[2] + 0.3 * x[3]  # φ(T) + 0.3 φ̇(T)

    v0 = jnp.zeros(6)
    g = np.asarray(jax.jit(jax.grad(cost))(v0))
    f = jax.jit(cost)
    fd = []
    for i in range(6):
        def d(h):
            e = np.zeros(6)
            e[i] = h
            return (float(f(v0 + e)) - float(f(v0 - e))) / (2 * h)
        fd.append((4 * d(5e-5) - d(1e-4)) / 3)
    assert rel(g, fd) < 1e-6


# --------------------------------------------------------------------------------------
# failing input 3: refused adjoints


@pytest.mark.parametrize("name", ["direct", "recursive"])
def test_refused_adjoints_name_the_one_that_works(name):
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    with pytest.raises(ValueError, match="adjoint='discrete'"):
        rb.final_gc(ball, ctl, PAPER_BALL_X0, (0.0, 1.0), adjoint=name)


def test_diffrax_adjoint_objects_refused_or_accepted_by_kind():
    """diffrax adjoint objects: ``RecursiveCheckpointAdjoint()`` and ``DirectAdjoint()`` are
    refused with their own reason and the adjoint that works; ``BacksolveAdjoint()`` is
    used as given; any other adjoint object is refused, naming the supported ones."""
    import diffrax as dfx

    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)

    def gc(adjoint):
        return rb.final_gc(ball, ctl, PAPER_BALL_X0, (0.0, 1.0), adjoint=adjoint)

    with pytest.raises(ValueError, match=r"RecursiveCheckpointAdjoint is refused: .*re-decides the steps.*adjoint='discrete'"):
        gc(dfx.RecursiveCheckpointAdjoint())
    with pytest.raises(ValueError, match=r"DirectAdjoint is refused: .*DirectAdjoint with adaptive steps.*adjoint='discrete'"):
        gc(dfx.DirectAdjoint())
    with pytest.raises(ValueError, match=r"ImplicitAdjoint is not supported here; choose one of .*backsolve"):
        gc(dfx.ImplicitAdjoint())
    backsolve = dfx.BacksolveAdjoint()
    assert rb.sensitivity.resolve_adjoint(backsolve) is backsolve


def test_implicit_solver_refused_by_discrete_adjoint():
    import diffrax as dfx

    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    with pytest.raises(rb.ModelError, match="explicit Runge"):
        rb.final_gc(ball, ctl, PAPER_BALL_X0, (0.0, 1.0), solver=dfx.Kvaerno5())


def test_too_many_steps_raises_naming_max_steps():
    """The error names ``max_steps`` and, under the default tangent bound (which keeps
    resolving a mode that has decayed), the carried tangent as the remedy for fast damping."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    with pytest.raises(Exception, match="max_steps=16 .*tangent_control='tangent'"):
        jax.block_until_ready(rb.final_gc(ball, ctl, PAPER_BALL_X0, (0.0, 20.0), max_steps=16))
    cost = dict(integrand=lambda t, x: x[3], max_steps=16)
    with pytest.raises(Exception, match="max_steps"):
        jax.block_until_ready(rb.running_cost(ball, ctl, PAPER_BALL_X0, (0.0, 20.0), **cost))
    assert np.isinf(float(rb.running_cost(ball, ctl, PAPER_BALL_X0, (0.0, 20.0), **cost, throw=False)))


@pytest.mark.slow
def test_failed_solve_is_visible_in_every_jitted_derivative():
    """Under ``jax.jit`` of a derivative the solve's value is not an output, so a check on
    the value alone is dead code: before, ``jax.jit(jax.grad(f))`` of a solve that ran out
    of steps returned zeros, silently (every route; the paper ball's GC gradient was 0 in
    all 15 components). Now forward and reverse mode raise naming ``max_steps`` (the
    backsolve route too; Heun there only to keep its compile short), and with
    ``throw=False`` the value is inf and every derivative NaN. A disk with one mass keeps
    the four programs small."""
    import diffrax as dfx

    disk, ctl = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)]), rb.PaperStep.ball(1)
    x0 = jnp.asarray(disk.initial_state(theta=[-1.0]))

    def gc(x, **kw):
        return rb.final_gc(disk, ctl, x, (0.0, 5.0), max_steps=8, **kw)[0]

    for derivative in (jax.grad, jax.jacfwd):
        with pytest.raises(Exception, match="max_steps"):
            jax.block_until_ready(jax.jit(derivative(gc))(x0))
    with pytest.raises(Exception, match="max_steps"):
        jax.block_until_ready(jax.jit(jax.grad(lambda x: gc(x, adjoint="backsolve", solver=dfx.Heun())))(x0))

    @jax.jit
    def no_throw(x):
        value, grad = jax.value_and_grad(lambda y: gc(y, throw=False))(x)
        return value, grad, jax.jacfwd(lambda y: gc(y, throw=False))(x)

    value, grad, jac = no_throw(x0)
    assert np.isinf(float(value)) and np.all(np.isnan(np.asarray(grad))) and np.all(np.isnan(np.asarray(jac)))

    # In a batch only the failed member's derivative is NaN: t1 = 0.3 takes 5 steps, t1 = 5 takes 21.
    def final(x, t1):
        return rb.final_gc(disk, ctl, x, jnp.stack([0.0, t1]), max_steps=8, throw=False)[0]

    g = np.asarray(jax.jit(jax.vmap(jax.grad(final), in_axes=(None, 0)))(x0, jnp.array([0.3, 5.0])))
    g_alone = np.asarray(jax.jit(jax.grad(final))(x0, 0.3))
    assert np.all(np.isfinite(g_alone)) and rel(g[0], g_alone) < 1e-13 and np.all(np.isnan(g[1]))  # batched: rounding


@pytest.mark.slow
def test_gradient_of_a_vmapped_solve_equals_the_members_gradients():
    """``jax.grad`` of a ``jax.vmap`` of solves (a batch loss): the shared mass's
    gradient is the sum of the members', each initial state's that of its own solve (to
    the rounding of a batched solve: 2.5e-13 and 1.4e-13 relative measured; bound 1e-11).
    A check on the solve's inputs with the batched failure status once made this fail to
    trace."""
    disk, ctl = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)]), rb.PaperStep.ball(1)
    X0 = jnp.stack([jnp.asarray(disk.initial_state(theta=[-1.0])), jnp.asarray(disk.initial_state(theta=[0.5]))])

    def gc(m, x):
        return rb.final_gc(eqx.tree_at(lambda d: d.masses, disk, m), ctl, x, (0.0, 1.0))[0]

    m = jnp.asarray(disk.masses)
    g_m, g_x = jax.jit(jax.grad(lambda m, X: jnp.sum(jax.vmap(gc, in_axes=(None, 0))(m, X)), argnums=(0, 1)))(m, X0)
    each = [jax.jit(jax.grad(gc, argnums=(0, 1)))(m, x) for x in X0]  # one program, two calls
    assert rel(g_m, each[0][0] + each[1][0]) < 1e-11
    assert rel(g_x, jnp.stack([e[1] for e in each])) < 1e-11


def test_backsolve_refuses_forward_mode_naming_the_default():
    """diffrax's BacksolveAdjoint is a custom VJP: forward mode is refused with an error
    that names the adjoint that has it (JAX's own message names neither)."""
    disk, ctl = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)]), rb.PaperStep.ball(1)
    with pytest.raises(TypeError, match="adjoint='discrete'"):  # raised while tracing: nothing compiles
        jax.jacfwd(lambda x: rb.final_gc(disk, ctl, x, (0.0, 1.0), adjoint="backsolve")[0])(
            jnp.asarray(disk.initial_state(theta=[-1.0])))


# --------------------------------------------------------------------------------------
# failing input 4: knot times


@pytest.mark.parametrize("kind", ["spline", "linear", "paper"])
def test_knot_times_have_zero_derivative_by_construction(kind):
    """Kink times are jump times (steps stop there): not differentiated, derivative 0
    exactly, while the values' derivative is non-zero."""
    disk, x0, _ = _hanging_disk()
    if kind == "spline":
        ctl = rb.CubicSplineControl([0.0, 1.0, 2.0, 3.0], [[0.0, 0.5, -0.3, 0.2]])
        times, values = (lambda c: c.knots), (lambda c: c.values)
    elif kind == "linear":
        ctl = rb.PiecewiseLinearControl([0.0, 1.0, 2.0, 3.0], [[0.0, 0.5, -0.3, 0.2]])
        times, values = (lambda c: c.knots), (lambda c: c.values)
    else:
        ctl = rb.PaperStep([1.0])
        times, values = (lambda c: jnp.stack([c.t_a, c.t_b])), (lambda c: c.amplitude)

    g = jax.grad(lambda c: rb.final_state(disk, c, x0, (0.0, 3.0))[2])(ctl)
    assert np.all(np.asarray(times(g)) == 0.0)
    assert np.max(np.abs(np.asarray(values(g)))) > 1e-3


@pytest.mark.slow
def test_start_and_end_time_derivatives_follow_the_ode():
    """Derivatives with respect to t0 and t1 (``_time_tangents``; they were 0, silently):
    the disk with a swinging mass under a smooth time-dependent control, ∂φ̇(t1)/∂(t0, t1)
    by reverse mode against Richardson-extrapolated central differences of the solve
    (measured 4.8e-9 and 1.1e-11 relative), and the derivative of ∂φ̇(t1)/∂t1 with respect
    to the initial state, forward over reverse (time innermost), against central
    differences of that gradient (4.5e-9). Bounds 1e-7: the differences' own floor, a
    solve error ~tol = 1e-10 (not smooth in t) over h = 1e-3. A derivative with respect to a time
    of another derivative (here ``jax.hessian`` in (y, t1), and t1 outermost over y) would
    miss ∂f/∂x·Φ: it raises ``NotImplementedError`` while tracing, naming the order that
    works."""
    disk, x0, _ = _hanging_disk()
    ctl = rb.FunctionControl(lambda t, a: a * jnp.sin(t), 0.5)

    def phi(y, t):  # y = (φ(0), φ̇(0)), t = (t0, t1)
        return rb.final_state(disk, ctl, x0.at[2:].set(y), t, rtol=TOL, atol=TOL)[3]

    y, t = jnp.array([0.3, -0.2]), jnp.array([0.4, 6.0])
    grad_t = jax.jit(jax.grad(phi, argnums=1))
    g = np.asarray(grad_t(y, t))

    def richardson(f, x, i, h):
        d = lambda h: (np.asarray(f(x.at[i].add(h))) - np.asarray(f(x.at[i].add(-h)))) / (2 * h)
        return (4 * d(h / 2) - d(h)) / 3

    for i in (0, 1):
        fd = richardson(lambda s: phi(y, s), t, i, 1e-3)
        assert abs(g[i] - fd) <= 1e-7 * abs(fd), (i, g[i], fd)
    mixed = np.asarray(jax.jit(jax.jacfwd(lambda y: grad_t(y, t)[1]))(y))  # ∂/∂y of ∂φ̇(t1)/∂t1
    fd = np.array([richardson(lambda z: grad_t(z, t)[1], y, i, 1e-3) for i in range(2)])
    assert np.max(np.abs(mixed)) > 1e-2 and rel(mixed, fd) < 1e-7
    # under jax.vmap over t1 with x0 unbatched, jax.grad of the batch (it raised a TypeError
    # while the identities' values were unbatched and their tangents batched); vmapped
    # arithmetic rounds differently (measured 4.2e-12), bound 10 tol
    batch = jax.jit(jax.grad(lambda t1s: jax.vmap(lambda t1: phi(y, jnp.stack([t[0], t1])))(t1s).sum()))
    np.testing.assert_allclose(np.asarray(batch(jnp.array([t[1], t[1]]))), g[1], rtol=10 * TOL)
    with pytest.raises(NotImplementedError, match="innermost"):
        jax.hessian(phi, argnums=(0, 1))(y, t)
    with pytest.raises(NotImplementedError, match="innermost"):
        jax.jacfwd(jax.grad(phi), argnums=1)(y, t)


# --------------------------------------------------------------------------------------
# failing input 5: second derivatives


@pytest.fixture(scope="module")
def hessian_problem():
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    x0 = jnp.asarray(PAPER_BALL_X0)

    def gc1(omega):
        return rb.final_gc(ball, ctl, x0.at[10:13].set(omega), (0.0, 5.0), rtol=TOL, atol=TOL)[0]

    return gc1, jnp.array([0.1, -0.05, 0.02])


@pytest.mark.slow
def test_hessian_forward_over_reverse_matches_fd_of_gradient(hessian_problem):
    """jax.hessian (forward-over-reverse) of GC₁(5) w.r.t. Ω(0): first row
    (−4.00046, 3.01309, 4.90948) (issue), and every entry vs central differences of the
    reverse-mode gradient ≤ 1e-6 relative. The differences are Richardson-extrapolated
    from h = 1e-3 and 5e-4: a gradient at tol 1e-10 jumps by ~1e-10 relative where a
    perturbation changes the step sequence, which a plain difference at h = 1e-5 turns
    into ~1e-6 (measured 3.1e-6 here with the default tangent bound, 2.8e-7 with the
    carried tangent; the Hessians are equally accurate: 2.2e-9 and 2.7e-9 from a tol-1e-13
    Hessian). Measured 3.3e-8 (carried tangent 1.5e-8)."""
    gc1, w = hessian_problem
    H = np.asarray(jax.jit(jax.hessian(gc1))(w))
    np.testing.assert_allclose(H[0], [-4.00046, 3.01309, 4.90948], atol=2e-5)
    grad = jax.jit(jax.grad(gc1))

    def central(h):
        return np.stack([(np.asarray(grad(w.at[i].add(h))) - np.asarray(grad(w.at[i].add(-h)))) / (2 * h) for i in range(3)])

    fd = (4.0 * central(5e-4) - central(1e-3)) / 3.0  # O(h⁴)
    assert rel(H, fd) < 1e-6
    assert rel(H, H.T) < 1e-8  # symmetric to rounding of the discrete map


@pytest.mark.slow
def test_hvp_and_reverse_over_reverse():
    """Hessian-vector product (jvp of grad) and jacrev∘jacrev agree with each other and
    with central differences of the gradient (hanging disk, perturbed, T = 6: a small
    program so the nested compiles stay quick). ``jax.hessian`` (forward over reverse) is
    checked against differences of the gradient in the test above; compiling it here
    too cost ~4 s and checked nothing the two routes below do not."""
    disk, x0, _ = _hanging_disk()
    ctl = rb.ConstantControl([0.0])

    def phi(y):
        return rb.final_state(disk, ctl, x0.at[2:].set(y), (0.0, 6.0), rtol=TOL, atol=TOL)[2]

    y = jnp.array([0.3, -0.2])
    H_rr = np.asarray(jax.jit(jax.jacrev(jax.jacrev(phi)))(y))
    assert np.max(np.abs(H_rr)) > 1e-2  # non-trivial: the pendulum is non-linear at 0.3 rad
    v = jnp.array([0.7, -1.0])
    grad_and_hvp = jax.jit(lambda y: jax.jvp(jax.grad(phi), (y,), (v,)))  # (∇φ(y), H(y) v)
    hvp = grad_and_hvp(y)[1]
    assert rel(hvp, H_rr @ np.asarray(v)) < 1e-13  # two programs, equal to rounding (5e-16 measured)

    def grad(y):  # the gradient from the program above: no separate compile
        return grad_and_hvp(y)[0]

    h = 1e-5
    fd = np.stack([(np.asarray(grad(y.at[i].add(h))) - np.asarray(grad(y.at[i].add(-h)))) / (2 * h) for i in range(2)])
    assert rel(H_rr, fd) < 1e-6  # 5.1e-8 measured (the differences' own truncation)
    assert rel(H_rr, H_rr.T) < 1e-12  # symmetric to rounding (0 measured)


@pytest.mark.parametrize("example", ["ball", "disk"])
def test_recording_pass_takes_diffrax_steps(example):
    """The recording pass reproduces diffrax's PID controller with jump times (the same
    step sequence as ``rb.integrate``, to which the discrete adjoint's derivative belongs).
    Measured over [0, 20] on the paper examples: disk 64 accepted / 14 rejected in both,
    final states 3e-14 apart; ball 47 / 18 vs diffrax's 50 / 18 (diffrax splits a step at
    a jump time differently), 2.5e-12 apart. A changed safety factor, error norm or step
    clipping changes the counts by far more than the bounds (±2, ±5)."""
    import diffrax as dfx

    from conftest import PAPER_DISK_X0, make_paper_disk
    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    if example == "ball":
        model, ctl, x0, tol, slack = make_paper_ball(), rb.PaperStep.ball(3), PAPER_BALL_X0, 1e-10, 5
    else:
        model, ctl, x0, tol, slack = make_paper_disk(), rb.PaperStep.disk(4), PAPER_DISK_X0, 1e-12, 2
    ts = jnp.array([0.0, 20.0])
    sol = rb.integrate(model, ctl, x0, ts, rtol=tol, atol=tol)
    vf, params = discrete_adjoint.model_field(model, ctl)
    tab = _rk.Tableau.from_solver(dfx.Dopri8())
    _, y_end, t_end, ok, stats = jax.jit(lambda: _rk.adaptive_solve(
        tab, lambda t, y: vf(params, t, y), 0.0, 20.0, jnp.asarray(x0), rtol=tol, atol=tol,
        jump_ts=ctl.kink_times, max_steps=4096, save_ts=ts))()
    assert bool(ok) and float(t_end) == 20.0
    assert abs(int(stats["num_accepted_steps"]) - int(sol.stats["num_accepted_steps"])) <= slack
    assert abs(int(stats["num_rejected_steps"]) - int(sol.stats["num_rejected_steps"])) <= slack
    assert rel(y_end, sol.ys[0][-1]) <= 100 * tol


def test_initial_step_is_diffraxs():
    """Hairer's starting step (``_rk.hairer_initial_step``, used by the batch loops) equals the
    one diffrax's ``PIDController.init`` picks, in each branch: the paper ball at tol 1e-10
    (the usual branch, h = (0.01/max(d1, d2))^(1/8)), a state small against ``atol``
    (1e-5 ≤ d0 < 1, where a wrong threshold would fall back to 1e-6), the zero state at
    equilibrium (f0 = 0: h = 1e-6), an equilibrium away from zero (d1 < 1e-5 ≤ d0), the zero
    state off equilibrium (d0 < 1e-5 ≤ d1), a constant field where the cap 100·h0 binds, and a
    time-dependent and a non-linear field whose second-derivative estimate d2 decides the
    step. Measured: equal to rounding (≤ 2e-16 relative)."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    tab = _rk.Tableau.from_solver(dfx.Dopri8())
    ball = make_paper_ball()
    vf, params = discrete_adjoint.model_field(ball, rb.PaperStep.ball(3))
    A = jnp.array([[0.0, 1.0], [-4.0, -0.1]])
    cases = [(lambda t, y: vf(params, t, y), jnp.asarray(PAPER_BALL_X0), 1e-10, 1e-10),
             (lambda t, y: A @ y, jnp.array([1e-12, 0.5e-12]), 1e-6, 1e-10),
             (lambda t, y: A @ y, jnp.zeros(2), 1e-8, 1e-8),
             (lambda t, y: A @ (y - jnp.array([1.0, -0.5])), jnp.array([1.0, -0.5]), 1e-8, 1e-8),
             (lambda t, y: A @ y + jnp.array([0.0, 1.0]), jnp.zeros(2), 1e-8, 1e-8),
             (lambda t, y: jnp.ones(2), jnp.full(2, 1e-9), 1e-9, 1e-9),
             (lambda t, y: jnp.exp(5.0 * t) * jnp.ones(2), jnp.ones(2), 1e-6, 1e-6),
             (lambda t, y: y**2, jnp.ones(2), 1e-6, 1e-6)]
    steps = []
    for rhs, y0, rtol, atol in cases:
        ours = float(_rk.hairer_initial_step(rhs, 0.0, y0, rhs(0.0, y0), rtol, atol, tab.error_order))
        term = dfx.ODETerm(lambda t, y, args, rhs=rhs: rhs(t, y))
        t_next, _ = dfx.PIDController(rtol=rtol, atol=atol).init(
            term, 0.0, 1.0, y0, None, None, lambda term, t, y, args: term.vf(t, y, args), tab.error_order)
        assert ours == pytest.approx(float(t_next), rel=1e-12)
        steps.append(ours)
    d0 = float(jnp.sqrt(jnp.mean((cases[1][1] / (1e-10 + 1e-6 * jnp.abs(cases[1][1]))) ** 2)))
    assert 1e-5 < d0 < 1.0 and steps[1] > 1e-4  # the scaled branch, far from the 1e-6 fallback
    assert steps[2] == 1e-6 and steps[3] == 1e-6
    # (the last two have d2 > d1: the Euler probe must step forward in time, and in y along f0)
    # constant field: h0 = 0.01·d0/d1 = 1e-11 and h = 100·h0 (the cap binds; h1 ≈ 0.04)
    assert steps[5] == pytest.approx(1e-9, rel=1e-12)


@pytest.mark.slow
def test_save_time_just_after_a_kink_is_saved():
    """A save time one ulp after a kink time of the control (a spline knot), where the step
    sequence hops over the kink and starts the next step, is saved, not left at zero: the
    states equal ``rb.simulate``'s (diffrax, interpolated) to the tolerance, and its forward-
    and reverse-mode derivatives agree. Found by multiple shooting at T = 35: the sample
    14.000000000000002 of a segment came back as the zero state. Two save times inside
    that gap cannot both be step ends: refused, naming the cause. (The step-stop logic
    does not depend on the model: a one-mass disk, whose programs compile in less than
    half the paper ball's time; the ball measured 7.2e-10 and the same refusal.)"""
    disk = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)])
    x_init = np.asarray(disk.initial_state(theta=[-1.0]))
    ctl = rb.CubicSplineControl(np.linspace(0.0, 20.0, 21), 0.1 * np.ones((1, 21)))
    after = float(np.nextafter(14.0, 15.0))
    ts = jnp.array([0.0, 13.5, after, 15.0])
    xs = rb.trajectory(disk, ctl, x_init, ts, rtol=1e-8, atol=1e-8)
    ref = rb.simulate(disk, ctl, x_init, (0.0, 15.0), ts=np.asarray(ts), rtol=1e-12, atol=1e-12).xs
    assert np.max(np.abs(np.asarray(xs[2]))) > 0.1  # not the zero state
    assert np.max(np.abs(np.asarray(xs) - np.asarray(ref))) < 5e-8  # measured 2.6e-9 (tol 1e-8)

    def state_after(x0):
        return rb.trajectory(disk, ctl, x0, ts, rtol=1e-8, atol=1e-8)[2]

    x0 = jnp.asarray(x_init)
    J_rev, J_fwd = jax.jacrev(state_after)(x0), jax.jacfwd(state_after)(x0)
    assert np.max(np.abs(np.asarray(J_fwd))) > 1e-2 and rel(J_rev, J_fwd) < 1e-10
    with pytest.raises(Exception, match="save time was passed over"):
        rb.trajectory(disk, ctl, x_init, jnp.array([0.0, 14.0, after, 15.0]), rtol=1e-8, atol=1e-8)


@pytest.mark.slow
def test_throw_false_returns_inf_instead_of_raising():
    """``throw=False`` (used by optimisers to reject a trial point): a solve that runs out of
    steps, or whose save time was passed over, returns ``inf`` states instead of raising;
    a solve that succeeds returns the same states as with ``throw=True``."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    ts = jnp.array([0.0, 10.0, 20.0])  # 43 steps (30 accepted; measured; 48/34 with the carried tangent): 16 are too few
    ok = rb.trajectory(ball, ctl, PAPER_BALL_X0, ts, rtol=1e-8, atol=1e-8, throw=False)
    ref = rb.trajectory(ball, ctl, PAPER_BALL_X0, ts, rtol=1e-8, atol=1e-8)
    assert np.all(np.isfinite(ok)) and np.array_equal(np.asarray(ok), np.asarray(ref))
    short = rb.trajectory(ball, ctl, PAPER_BALL_X0, ts, rtol=1e-8, atol=1e-8, max_steps=16, throw=False)
    assert np.all(np.isinf(np.asarray(short)))
    spline = rb.CubicSplineControl(np.linspace(0.0, 20.0, 21), 0.1 * np.ones((3, 21)))
    after = float(np.nextafter(14.0, 15.0))
    missed = rb.trajectory(ball, spline, PAPER_BALL_X0, jnp.array([0.0, 14.0, after, 15.0]), rtol=1e-8,
                           atol=1e-8, throw=False)
    assert np.all(np.isinf(np.asarray(missed)))


def test_disk_final_gc_follows_rolling_constraint_and_distance_is_smooth_at_target():
    """Disk: the final GC is z_a − r(φ(T) − φ(0)) (5.41) with the given z_a (default 0), at
    height 0; ``distance_to_target`` is exactly 0 at the final GC, with a finite (zero)
    gradient there (it is written as sqrt(d² + tiny))."""
    disk, ctl = make_paper_disk(), rb.PaperStep.disk(4)
    x0 = jnp.asarray(PAPER_DISK_X0)
    xT = rb.final_state(disk, ctl, x0, (0.0, 2.0))
    roll = -float(disk.radius) * float(xT[8] - x0[8])
    assert abs(roll) > 1e-2  # the disk has rolled
    gc = rb.final_gc(disk, ctl, x0, (0.0, 2.0), z_a=0.7)
    np.testing.assert_allclose(np.asarray(gc), [0.7 + roll, 0.0, 0.0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(rb.final_gc(disk, ctl, x0, (0.0, 2.0)))[0], roll, rtol=0, atol=1e-14)

    def dist(x, target):
        return rb.distance_to_target(disk, ctl, x, (0.0, 2.0), target)

    target = np.asarray(rb.final_gc(disk, ctl, x0, (0.0, 2.0)))[:2]
    assert float(dist(x0, target)) < 1e-140
    # The gradient at the target itself: the target is this program's own final GC (held
    # fixed), so that d = 0 exactly. A target from another compiled program may differ from it
    # in the last bit (measured with LLVM -O0: 1 ulp), and then the gradient is the unit
    # vector of a norm, not zero.
    g = jax.grad(lambda x: dist(x, jax.lax.stop_gradient(rb.final_gc(disk, ctl, x, (0.0, 2.0))[:2])))(x0)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.max(jnp.abs(g))) == 0.0
    assert float(dist(x0, target + np.array([0.3, 0.4]))) == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("kinks, exact", [([1.0], 1.0), ([0.5, 1.0], 2.25)], ids=["one kink", "two kinks"])
def test_declared_kinks_are_step_stops(kinks, exact):
    """ẏ = p·Σ|t − kᵢ| is piecewise linear in t: Runge–Kutta integrates each piece exactly, so
    with the kinks declared (steps stop at them) y(2) = p·∫₀²Σ|t − kᵢ|dt to rounding at a
    loose tolerance, and so is its derivative in p. Undeclared, the steps straddle the
    kinks and the error is at the tolerance level (measured: 2e-16 and 9e-16 declared, the
    derivative exact; 2.2e-4 and 5.9e-4 undeclared, at rtol = atol = 1e-4). One kink
    matters: a single jump time must not be dropped as "no jump times"."""
    from rollball_jax import _discrete_adjoint as discrete_adjoint

    ks = jnp.asarray(kinks)

    def vf(p, t, y):
        return p * jnp.sum(jnp.abs(t - ks)) * jnp.ones(1)

    def y2(p, declared=True):
        return discrete_adjoint.solve(vf, p, jnp.zeros(1), jnp.array([0.0, 2.0]), ks if declared else None,
                                      rtol=1e-4, atol=1e-4)[-1, 0]

    p = jnp.asarray(1.3)
    assert abs(float(y2(p)) - 1.3 * exact) <= 1e-13
    assert abs(float(jax.grad(y2)(p)) - exact) <= 1e-13
    assert abs(float(y2(p, declared=False)) - 1.3 * exact) > 1e-6


@pytest.mark.parametrize("solver_name, stages", [("Dopri8", 13), ("Tsit5", 6), ("Dopri5", 6)])
def test_replayed_step_is_diffraxs_step_without_the_fsal_stage(solver_name, stages):
    """The replay evaluates only the stages the solution depends on (a FSAL solver's last
    stage, f(t1, y1), feeds only the error estimate), and its step is still diffrax's own
    ``solver.step``: on a nonlinear, time-dependent field the two agree to rounding
    (measured: 0, 0 and 9e-17 relative). Dropping a stage that has a weight (Dopri8's
    stage 13 has b = 0.25) would change y1 by 0.25·h·|f| ≈ 1e-2 here (the step moves y by 0.09).
    The first stage runs in the stage loop too, so the field is traced once."""
    import diffrax as dfx

    from rollball_jax import _rk

    solver = getattr(dfx, solver_name)()
    tab = _rk.Tableau.from_solver(solver)
    assert _rk.solution_stages(tab) == stages == len(tab.b_sol) - 1
    rhs = lambda t, y: jnp.stack([y[1], -jnp.sin(y[0]) + 0.3 * jnp.cos(2.0 * t) * y[1] ** 2])
    calls = []
    counted = lambda t, y: (calls.append(1), rhs(t, y))[1]
    y0, t0, t1 = jnp.array([0.7, -0.4]), 0.3, 0.45
    ours = _rk.rk_step_rolled(tab, counted, t0, t1, y0)
    term = dfx.ODETerm(lambda t, y, args: rhs(t, y))
    state = solver.init(term, t0, t1, y0, None)
    theirs = solver.step(term, t0, t1, y0, None, state, made_jump=False)[0]
    assert rel(ours, theirs) < 1e-14
    assert len(calls) == 1  # one copy of the field in the program: the stage loop's


def test_stage_loop_from_a_preset_first_stage_and_per_member_steps():
    """``_rk.stage_loop`` is the one stage loop of the recording pass (first stage preset from
    FSAL, ``start = 1``, a traced start), the replay (``rk_stages``, from stage 0) and the
    batch group loops (members on a trailing axis, per-member steps ``h``, stage sums by
    ``tensordot``). Each form gives the stages of the plain loop from stage 0 to rounding
    (measured: 0, and ≤ 9.3e-16 relative for the group form; bound 1e-14); a loop started one stage late or
    early, or with another member's step, is off by O(1); a stage at the step's end is
    evaluated at ``t1`` exactly."""
    import diffrax as dfx

    from rollball_jax import _rk

    tab = _rk.Tableau.from_solver(dfx.Dopri8())
    rhs = lambda t, y: jnp.stack([y[1], -jnp.sin(y[0]) + 0.3 * jnp.cos(2.0 * t) * y[1] ** 2])
    y0, t0, t1 = jnp.array([0.7, -0.4]), 0.3, 0.45
    K_ref = _rk.rk_stages(tab, rhs, t0, t1, y0)
    S = K_ref.shape[0]
    K1 = jnp.zeros((S, 2)).at[0].set((t1 - t0) * rhs(t0, y0))
    for scatter in (False, True):
        assert rel(_rk.stage_loop(tab, rhs, t0, t1, y0, K1, start=1, scatter=scatter), K_ref) < 1e-14
    traced = jax.jit(lambda s: _rk.stage_loop(tab, rhs, t0, t1, y0, K1, start=s))
    assert rel(traced(1), K_ref) < 1e-14
    assert rel(traced(2), K_ref) > 1e-3  # stage 1 left at zero
    # Group form: three members (trailing axis) with their own t0 and step h.
    t0s, hs = jnp.array([0.3, 1.1, -0.5]), jnp.array([0.15, 0.05, 0.3])
    Y0 = jnp.array([[0.7, 0.2, -1.0], [-0.4, 0.9, 0.1]])
    K0 = jnp.zeros((S, 2, 3)).at[0].set(hs * rhs(t0s, Y0))
    K = _rk.stage_loop(tab, rhs, t0s, t0s + hs, Y0, K0, start=1, h=hs,
                       combine=lambda w, K: jnp.tensordot(w, K, axes=1))
    for m in range(3):
        ref = _rk.rk_stages(tab, rhs, t0s[m], t0s[m] + hs[m], Y0[:, m])
        assert rel(K[:, :, m], ref) < 1e-14
    assert rel(K[:, :, 0], _rk.rk_stages(tab, rhs, t0s[1], t0s[1] + hs[1], Y0[:, 0])) > 1e-3
    # Stages at the step's end (c = 1) are evaluated at t1 itself, not at t0 + (t1 − t0), which
    # here rounds one ulp past t1: a step ending just before a jump time (prevbefore(jump), as
    # the recording pass clips it) must not see the far side of the jump.
    ta, tb = 0.20007002630130422, 2.52395183883715
    assert ta + (tb - ta) > tb
    jump = lambda t, y: jnp.where(t > tb, 1e3, 1.0) * jnp.ones_like(y)
    hb = tb - ta
    assert jnp.all(_rk.rk_stages(tab, jump, ta, tb, y0) == hb)
    Kb = jnp.zeros((S, 2)).at[0].set(hb * jump(ta, y0))
    assert jnp.all(_rk.stage_loop(tab, jump, ta, tb, y0, Kb, start=1) == hb)


def test_recording_pass_holds_one_copy_of_the_field():
    """The recording pass evaluates the first stage inside its stage loop (first step, after
    a jump, or a solver without FSAL), so the field is traced once, with and without the
    probe tangent and with the tangent bound (its J·u is an appended stage of the same loop); the result is unchanged: a linear oscillator with a jump time in the
    forcing, x'' = −x + [t > 1], solved over [0, 3] against its closed form (tol 1e-10;
    measured 2e-11 and 1e-11 relative, bound 1e-9) with no rejected step (measured 0; with
    the jump time not honoured: 50 and 45 rejected, errors 4e-10 and 2e-9)."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    calls = []

    def rhs(t, y):
        calls.append(1)
        return jnp.stack([y[1], -y[0] + jnp.where(t > 1.0, 1.0, 0.0)])

    exact = lambda t: np.array([np.cos(t) + (1 - np.cos(t - 1.0)), -np.sin(t) + np.sin(t - 1.0)])
    direction = jnp.asarray(discrete_adjoint._probe_direction(2))
    for probe, mode in ((None, "tangent"), (direction, "tangent"), (direction, "bound")):
        calls.clear()
        _, y_end, t_end, ok, stats = jax.jit(lambda: _rk.adaptive_solve(
            _rk.Tableau.from_solver(dfx.Dopri8()), rhs, 0.0, 3.0, jnp.array([1.0, 0.0]), rtol=1e-10, atol=1e-10,
            jump_ts=jnp.array([1.0]), max_steps=256, probe_v0=probe, probe=mode))()
        assert len(calls) == 1
        assert bool(ok) and rel(y_end, exact(3.0)) < 1e-9
        assert int(stats["num_rejected_steps"]) <= 2


@pytest.mark.slow
def test_probe_tolerance_is_ten_times_the_states():
    """The probe tangent is held to 10× the state's tolerances (``_rk.TANGENT_TOLERANCE_FACTOR``):
    on the paper ball over [0, 20] at tol 1e-10 the recording pass then takes 55 accepted
    steps (measured; 69 with the state's own tolerances, 49 with 100×, 50 without the
    probe: the count tells the factor apart), and its derivative ∂GC/∂x(0) is 2.4e-10 from
    a tol-1e-13 solve (bound 5e-9; without the probe 5.2e-10, measured 2026-12-05). The
    carried tangent is not the default (the tangent bound is): asked for by name."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    ball, ctl, x0 = make_paper_ball(), rb.PaperStep.ball(3), jnp.asarray(PAPER_BALL_X0)
    vf, params = discrete_adjoint.model_field(ball, ctl)
    record = jax.jit(lambda: _rk.adaptive_solve(
        _rk.Tableau.from_solver(dfx.Dopri8()), lambda t, y: vf(params, t, y), 0.0, 20.0, x0, rtol=TOL, atol=TOL,
        jump_ts=ctl.kink_times, max_steps=4096, probe_v0=jnp.asarray(discrete_adjoint._probe_direction(x0.shape[0]))))()[0]
    assert abs(int(record.num_accepted) - 55) <= 2
    jac = lambda tol: jax.jacfwd(lambda y: rb.final_gc(ball, ctl, y, (0.0, 20.0), rtol=tol, atol=tol, max_steps=20000,
                                                       tangent_control="tangent")[:2])(x0)
    assert rel(jac(TOL), jac(1e-13)) < 5e-9


def test_error_polynomial_is_the_embedded_estimate_on_the_linear_equation():
    """``_rk.error_polynomial``: one step of ẏ = λy (h = 1, y0 = 1) through the package's own
    stage loop has embedded error estimate Σ_q e_q λ^q, for Dopri8 and Tsit5 and λ of
    either sign (measured ≤ 2e-16 apart, the stage sums' rounding; bound 1e-13 + 1e-10
    relative: an off-by-one power or a wrong matrix power is off by O(1)); Dopri8's first nonzero coefficient is e_8 (an error
    estimate of order 8) = −2.4267e-7."""
    import diffrax as dfx

    from rollball_jax import _rk

    for solver in (dfx.Dopri8(), dfx.Tsit5()):
        tab = _rk.Tableau.from_solver(solver)
        e = np.asarray(_rk.error_polynomial(tab))
        S = _rk.stage_matrices(tab)[0]
        for lam in (-0.7, 1.5, -2.0, 3.0):
            K = _rk.stage_loop(tab, lambda t, y: lam * y, 0.0, 1.0, jnp.ones(1), jnp.zeros((S, 1)))
            err = float(jnp.sum(jnp.asarray(tab.b_err)[:, None] * K))
            poly = sum(c * lam ** (q + 1) for q, c in enumerate(e))
            assert abs(err - poly) <= 1e-13 + 1e-10 * abs(poly)
    e8 = np.asarray(_rk.error_polynomial(_rk.Tableau.from_solver(dfx.Dopri8())))
    assert np.all(e8[:7] == 0.0) and e8[7] == pytest.approx(-2.4267e-7, rel=1e-4)


def test_tangent_bound_sets_the_steps_of_a_state_at_rest():
    """A state at rest under ẏ = R·y, R a rotation generator (spectral radius ρ = 1, and
    ‖R·u‖ = ‖u‖ for every u, so the power iteration's ρ is exactly 1): the state's own error
    estimate is 0, so the tangent bound alone sets the steps, and every accepted step h
    satisfies Σ_q |e_q| h^q ≤ 10·(atol + rtol), with the controller settling near the
    largest such h, z* (measured: the longest step 0.93 z* for Dopri8, 0.90 z* for Heun). Bounds: every
    step ≤ z* (1e-9 slack) and the longest ≥ 0.8 z* — a ρ off by 2× moves the steps by 2×.
    Dopri8 (FSAL: one appended stage) with its stages rolled and unrolled, and Heun (no
    FSAL: two appended stages). And a badly scaled state, ẏ = [[0, K], [−1/K, 0]]·y with
    K = 100 (eigenvalues ±i, but ‖J·u‖ between 1/K and K): ρ comes from two power-iteration
    steps, sqrt(‖J·J·u‖) = 1 here, so the same bounds hold (with the larger of one step's ρ
    at the step's two ends, ρ ≈ K and the steps were ~100× shorter: 4,009 accepted over
    [0, 20] instead of 44; found by a break-it trial)."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    direction = jnp.asarray(discrete_adjoint._probe_direction(2))
    for solver, t1, tol, rolled, K in ((dfx.Dopri8(), 10.0, 1e-10, True, 1.0), (dfx.Dopri8(), 10.0, 1e-10, False, 1.0),
                                       (dfx.Heun(), 0.5, 1e-5, True, 1.0), (dfx.Dopri8(), 10.0, 1e-10, True, 100.0)):
        rhs = lambda t, y, K=K: jnp.stack([K * y[1], -y[0] / K])
        tab = _rk.Tableau.from_solver(solver)
        e = np.abs(np.asarray(_rk.error_polynomial(tab)))
        target = _rk.TANGENT_TOLERANCE_FACTOR * 2 * tol
        lo, hi = 0.0, 10.0  # z*: Σ|e_q| z^q = target, by bisection
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if sum(c * mid ** (q + 1) for q, c in enumerate(e)) < target else (lo, mid)
        rec, y_end, _, ok, _ = jax.jit(lambda: _rk.adaptive_solve(
            tab, rhs, 0.0, t1, jnp.zeros(2), rtol=tol, atol=tol, jump_ts=None, max_steps=4096,
            probe_v0=direction, probe="bound", rolled=rolled))()
        n = int(rec.num_accepted)
        h = np.asarray(rec.t_end[:n] - rec.t_start[:n])
        assert bool(ok) and np.all(np.asarray(y_end) == 0.0)
        assert h.max() <= lo * (1 + 1e-9) and h.max() >= 0.8 * lo, (tab.name, rolled, K, h.max() / lo)


@pytest.mark.slow
def test_tangent_bound_and_carried_tangent_resolve_the_equilibrium():
    """The two derivative-aware step controls. The carried tangent
    (``tangent_control="tangent"``, a second state through every stage): the hanging
    disk's ∂φ(T)/∂φ̇(0) = sin(ωT)/ω and ∂φ̇/∂φ̇ = cos(ωT) at tol 1e-10 (measured 1.9e-10
    relative at T = 20; bound 1e-6, the issue's; the default, the bound, is checked in
    ``test_equilibrium_stm_matches_linearised_pendulum``); reverse = forward mode there
    (both the exact derivative of the recorded map; bound 1e-12). The tangent bound
    (the default: one appended stage a step, J·u by a finite difference, a power
    iteration for the spectral radius ρ of ∂f/∂x, and a step bound from Dopri8's error
    polynomial) on the paper ball over [0, 20] (in motion, where the bound seldom binds):
    50 accepted steps (measured, as without derivative-aware control: the bound does not
    bind; 55 with the carried tangent), ∂GC/∂x(0) 5.2e-10 from a tol-1e-13 solve (bound
    6e-9; carried tangent 2.3e-10, none 5.2e-10: about as accurate as the solve's own
    steps). Anything
    else for ``tangent_control`` raises."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    disk, x0, omega = _hanging_disk()
    ctl = rb.ConstantControl([0.0])
    ts = jnp.array([0.0, 5.0, 20.0])
    stm = rb.state_transition_matrix(disk, ctl, x0, ts, rtol=TOL, atol=TOL, tangent_control="tangent")
    for k, T in enumerate([5.0, 20.0], start=1):
        assert abs(float(stm[k, 2, 3]) - np.sin(omega * T) / omega) <= 1e-6 * abs(np.sin(omega * T) / omega)
        assert abs(float(stm[k, 3, 3]) - np.cos(omega * T)) <= 1e-6
    phi = lambda x: rb.final_state(disk, ctl, x, (0.0, 20.0), rtol=TOL, atol=TOL, tangent_control="tangent")[2]
    assert rel(jax.jit(jax.grad(phi))(x0), jax.jit(jax.jacfwd(phi))(x0)) < 1e-12

    ball, ctl_b, x0_b = make_paper_ball(), rb.PaperStep.ball(3), jnp.asarray(PAPER_BALL_X0)
    vf, params = discrete_adjoint.model_field(ball, ctl_b)
    record = jax.jit(lambda: _rk.adaptive_solve(
        _rk.Tableau.from_solver(dfx.Dopri8()), lambda t, y: vf(params, t, y), 0.0, 20.0, x0_b, rtol=TOL, atol=TOL,
        jump_ts=ctl_b.kink_times, max_steps=4096, probe_v0=jnp.asarray(discrete_adjoint._probe_direction(x0_b.shape[0])),
        probe="bound"))()[0]
    assert 49 <= int(record.num_accepted) <= 53
    jac = lambda tol: jax.jacfwd(lambda y: rb.final_gc(ball, ctl_b, y, (0.0, 20.0), rtol=tol, atol=tol, max_steps=20000,
                                                       tangent_control="bound")[:2])(x0_b)
    assert rel(jac(TOL), jac(1e-13)) < 6e-9
    for bad in ("probe", "Bound", ""):
        with pytest.raises(ValueError, match="tangent_control"):
            rb.final_state(disk, ctl, x0, (0.0, 1.0), tangent_control=bad)


@pytest.mark.slow
def test_dense_output_saves_between_steps():
    """``dense=True``: the save times are not step stops; the states there are Dopri8's dense
    output on the steps of a solve to t1. A one-mass disk under the paper's ramp over
    [0, 10] with 201 save times at tol 1e-10 (no probe): 30 accepted steps instead of 201
    (measured, recording pass; bound 80), states within 1.7e-9 of a tol-1e-13 diffrax solve
    (bound 2e-8; the step-stop states: 1.3e-11). Derivatives of a weighted sum over the
    path: reverse = forward mode (2.5e-15; bound 1e-10), and they agree with the step-stop
    route's (a different discretisation) to 5.3e-10 (bound 1e-7). (The paper ball gave 28
    steps, 1.1e-9, 6e-16 and 1.9e-10 at 1.3× this test's CPU time.)"""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk

    disk = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)])
    ctl, x0 = rb.PaperStep.ball(1), jnp.asarray(disk.initial_state(theta=[-1.0]))
    ts = jnp.linspace(0.0, 10.0, 201)
    vf, params = discrete_adjoint.model_field(disk, ctl)
    rec = jax.jit(lambda: _rk.adaptive_solve(
        _rk.Tableau.from_solver(dfx.Dopri8()), lambda t, y: vf(params, t, y), 0.0, 10.0, x0, rtol=TOL, atol=TOL,
        jump_ts=ctl.kink_times, max_steps=4096, save_ts=ts, dense=True))()[0]
    assert int(rec.num_accepted) < 80 and bool(jnp.all(rec.save_step >= 0))

    def path(x, dense):  # a scalar of the whole sampled path
        xs = rb.trajectory(disk, ctl, x, ts, rtol=TOL, atol=TOL, dense=dense)
        return jnp.sum(xs * jnp.linspace(0.0, 1.0, ts.shape[0])[:, None])

    xs = rb.trajectory(disk, ctl, x0, ts, rtol=TOL, atol=TOL, dense=True)
    ref = rb.simulate(disk, ctl, x0, (0.0, 10.0), ts=np.asarray(ts), rtol=1e-13, atol=1e-13).xs
    assert np.max(np.abs(np.asarray(xs) - np.asarray(ref))) < 2e-8
    # t0 and t1 are exact: x0, and the step end of a solve saved at (0, 10) only (the same
    # steps); the interpolant evaluated at t1 instead was 1.3e-15 off (paper ball).
    ends = rb.trajectory(disk, ctl, x0, jnp.array([0.0, 10.0]), rtol=TOL, atol=TOL)
    assert np.array_equal(np.asarray(xs[0]), np.asarray(x0)) and np.array_equal(np.asarray(xs[-1]), np.asarray(ends[-1]))
    # jitted: an eager jax.grad compiles the solve twice (its primal and its transpose)
    g_rev = jax.jit(jax.grad(path), static_argnums=1)(x0, True)
    g_fwd = jax.jit(jax.jacfwd(path), static_argnums=1)(x0, True)
    assert rel(g_rev, g_fwd) < 1e-10
    assert rel(g_rev, jax.jit(jax.grad(path), static_argnums=1)(x0, False)) < 1e-7


@pytest.mark.slow
def test_dense_output_second_order_and_vmap():
    """Through ``dense=True``: ``jax.hessian`` (forward over reverse) equals the central
    difference of the reverse-mode gradient (disk, 31 save times over [0, 3], tol 1e-13,
    h = 1e-4: measured 2.1e-8 relative, bound 1e-6; at tol 1e-10 the difference is FD noise
    from the changing step sequence, 6.5e-7), and ``jax.vmap`` over initial states gives the
    single solves' values (equal to rounding; bound 1e-12)."""
    disk = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)])
    ctl = rb.ConstantControl([0.1])
    x0 = jnp.asarray(disk.initial_state(theta=[-1.0]))
    ts = jnp.linspace(0.0, 3.0, 31)

    def path(x):
        return rb.trajectory(disk, ctl, x, ts, rtol=1e-13, atol=1e-13, dense=True, max_steps=2048)[:, 2].sum()

    H = jax.hessian(path)(x0)
    g, h = jax.jit(jax.grad(path)), 1e-4
    fd = (g(x0.at[3].add(h)) - g(x0.at[3].add(-h))) / (2 * h)
    assert rel(H[3], fd) < 1e-6
    xs = jnp.stack([x0, x0.at[3].add(0.1)])
    assert rel(jax.vmap(path)(xs), jnp.stack([path(xs[0]), path(xs[1])])) < 1e-12
