"""The models' vector-field VJPs (``vector_field_vjp``), which the discrete adjoint's
reverse sweep evaluates once per replayed stage.

The ball's is written by hand for the core of (7.4) (``dynamics.ball.ball_kappa_vjp``);
it is checked against ``jax.vjp`` of the whole field (an independent route: JAX's
transpose of the forward program) for every rail kind, a closed-loop control (which reads the
state), an external force, no point masses, and a fast-spinning state; the default (``eqx.filter_vjp``) for the disk; and the sweep
is checked to call the model's VJP (so the hand-written one is the one in use).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import rollball_jax as rb
from rollball_jax.design import feedback as fb
from rollball_jax._discrete_adjoint import model_field


def _rails():
    rot = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))[0]
    return [rb.CircleRail(0.5, rotation=rot, center=[0.05, 0.0, 0.1]), rb.EllipseRail(0.4, 0.3),
            rb.FigureEightRail(0.3, 0.2), rb.SpokeRail([0.0, 0.6, 0.8], [-0.5, 0.5]),
            rb.FunctionRail(lambda th, p: p["a"] * jnp.array([jnp.cos(th), jnp.sin(th), 0.1 * th]), {"a": 0.3},
                            period=(0.0, 1.0))]


def _closed_loop_control(n, N, rng):
    """A TVLQR control ``u = ū − K(t)(x − x̄(t))``: it reads the state, so its derivative
    with respect to the state enters the field's VJP."""
    return fb.TVLQRControl(
        nominal=rb.ConstantControl(rng.standard_normal(n)), knots=jnp.array([0.0, 1.0]),
        x_nominal=jnp.asarray(rng.standard_normal((2, N))), x_second=jnp.zeros((2, N)),
        gains=jnp.asarray(rng.standard_normal((2, n, N))), gains_second=jnp.zeros((2, n, N)))


def _compare(model, control, rng, scales=(1.0,)):
    """Max relative differences (state, parameters) of ``ModelField.vjp`` to ``jax.vjp``
    of the field, at seeded random states (unit versor; entries ~ each of ``scales``) and
    cotangents, one compiled program for all."""
    vf, params = model_field(model, control)
    pf, unravel = ravel_pytree(params)
    n, t = model.n, 0.37

    @jax.jit
    def both(x, ct):
        _, pull = jax.vjp(lambda y, p: vf(unravel(p), t, y), x, pf)
        y_bar, p_bar = vf.vjp(unravel(pf), t, x, ct)
        return pull(ct), (y_bar, ravel_pytree(p_bar)[0])

    rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a)))
    out = []
    for scale in scales:
        x = scale * rng.standard_normal(model.state_size)
        if isinstance(model, rb.Ball):
            x[2 * n:2 * n + 4] /= np.linalg.norm(x[2 * n:2 * n + 4])
        (ay, ap), (hy, hp) = both(jnp.asarray(x), jnp.asarray(rng.standard_normal(model.state_size)))
        assert hp.shape == ap.shape == pf.shape
        out.append((rel(ay, hy), rel(ap, hp)))
    return np.max(out, axis=0)


def test_ball_vjp_equals_autodiff_on_every_rail_kind():
    """Five masses on the five rail kinds, an off-centre m0, a constant external force and
    a closed-loop control (open-loop controls only supply θ̈, which this one does too),
    at a state of order 1 and a fast-spinning one (|Ω|, |θ̇| ~ 30: the terms quadratic in
    Ω and θ̇ dominate): state and every parameter cotangent (model, rails, control)
    equal to ``jax.vjp`` to rounding. Measured 1.1e-15 (state) and 5.8e-15 (parameters,
    at the fast state); bound 1e-13 (a wrong term, sign
    or transposed matrix in the hand-written core is O(1))."""
    rng = np.random.default_rng(20261206)
    ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.01, 0.02, -0.05], 1.3, [0.5, 0.6, 0.7, 0.8, 0.9], _rails(),
                   force=rb.ConstantForce([0.1, -0.2, 0.3]))
    d_state, d_params = _compare(ball, _closed_loop_control(ball.n, ball.state_size, rng), rng, scales=(1.0, 30.0))
    assert d_state < 1e-13 and d_params < 1e-13


def test_ball_vjp_without_masses_with_a_time_dependent_force():
    """n = 0 (the static-internal-structure ball) with ``FunctionForce``: the Γ̃ = ΛᵀF_e
    and χ0 terms alone. Measured 5e-17 (state), 2e-16 (parameters)."""
    rng = np.random.default_rng(7)
    ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.01, 0.02, -0.05], 1.0,
                   force=rb.FunctionForce(lambda t, p: p * jnp.array([1.0, t, -0.5]), jnp.asarray(0.3)))
    d_state, d_params = _compare(ball, rb.ConstantControl([]), rng)
    assert d_state < 1e-13 and d_params < 1e-13


def test_disk_default_vjp_equals_autodiff():
    """The default ``AbstractModel.vector_field_vjp`` (``eqx.filter_vjp``), disk: the
    same program as ``jax.vjp`` of the field (measured: equal bit for bit)."""
    rng = np.random.default_rng(5)
    disk = rb.Disk(1.0, 1.0, 1.0, (0.1, 0.0), 1.0, [1.0, 0.5], [rb.CircleRail(0.9), rb.CircleRail(0.5)])
    d_state, d_params = _compare(disk, rb.CubicSplineControl([0.0, 1.0, 2.0], rng.standard_normal((2, 3))), rng)
    assert d_state < 1e-14 and d_params < 1e-14


class _DampedBall(rb.Ball):
    """A user's subclass with its own field (a damping torque on Ω)."""

    def vector_field(self, t, x, control):
        f = super().vector_field(t, x, control)
        n = self.n
        return f.at[2 * n + 4:2 * n + 7].add(-0.7 * x[2 * n + 4:2 * n + 7])


def test_a_subclass_with_its_own_field_gets_the_vjp_of_that_field():
    """The ball's hand-written VJP is of (7.2) only: a subclass that overrides
    ``vector_field`` gets the generic VJP of its own field (with the ball's, the damping
    term's cotangent −0.7·Ω̄ would be missing)."""
    rng = np.random.default_rng(3)
    ball = _DampedBall(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.1], 1.0, [1.0], [rb.CircleRail(0.5)])
    d_state, d_params = _compare(ball, rb.ConstantControl([0.3]), rng)
    assert d_state < 1e-13 and d_params < 1e-13


class _ScaledVJPBall(rb.Ball):
    """A ball whose VJP is twice the true one: the reverse gradient must double if the
    sweep uses the model's VJP."""

    def vector_field_vjp(self, t, x, control, ct):
        return jax.tree.map(lambda a: 2.0 * a, super().vector_field_vjp(t, x, control, ct))


@pytest.mark.slow
def test_reverse_sweep_uses_the_models_vjp():
    """∂z₁(1)/∂Ω(0) by reverse mode with a model whose VJP is doubled differs from the
    true model's at O(1), so the reverse sweep evaluates ``vector_field_vjp`` (that the
    true gradient equals forward mode to rounding is ``tests/test_reverse_sweep.py``'s)."""
    args = (1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.1], 1.0, [1.0], [rb.CircleRail(0.5)])
    ball, scaled = rb.Ball(*args), _ScaledVJPBall(*args)
    ctl = rb.ConstantControl([0.3])
    x0 = ball.initial_state(Omega=(0.2, -0.1, 0.3))

    def z1(model, omega):
        return rb.final_gc(model, ctl, x0.at[6:9].set(omega), (0.0, 1.0))[0]

    w = jnp.array([0.2, -0.1, 0.3])
    rev = np.asarray(jax.grad(lambda o: z1(ball, o))(w))
    rev_scaled = np.asarray(jax.grad(lambda o: z1(scaled, o))(w))
    assert np.max(np.abs(rev)) > 0.1
    assert np.max(np.abs(rev_scaled - rev)) > 0.1 * np.max(np.abs(rev))
