"""The vector field runs in its own XLA:CPU thunk executor (``rollball_jax._executor``): a
speed measure only, so every number must be the one the plain field gives."""

import re

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax._executor import own_executor
from conftest import make_paper_ball


def _paper_ball_field():
    ball = make_paper_ball()
    ctl = rb.PaperStep.ball(3)
    x0 = jnp.asarray(ball.initial_state(theta=[0.0, 2.0369, 0.7044], Omega=[0.1, -0.05, 0.02]))
    return ball, ctl, x0, (lambda t, y: ball.vector_field(t, y, ctl))


@pytest.mark.slow
def test_wrapped_field_gives_the_plain_values_and_derivatives():
    ball, ctl, x0, field = _paper_ball_field()
    wrapped = own_executor(field)
    rng = np.random.default_rng(11)
    ys = x0 + 0.1 * jnp.asarray(rng.standard_normal((5, x0.shape[0])))
    ts = jnp.asarray([0.0, 0.05, 0.1, 0.15, 3.0])  # both sides of the control's kinks
    tangent = jnp.asarray(rng.standard_normal(x0.shape[0]))
    np.testing.assert_array_equal(jax.jit(jax.vmap(wrapped))(ts, ys), jax.jit(jax.vmap(field))(ts, ys))

    def value_jvp_vjp(f):
        def one(t, y):
            value, jvp = jax.jvp(lambda z: f(t, z), (y,), (tangent,))
            return value, jvp, jax.vjp(lambda z: f(t, z), y)[1](tangent)[0]
        return jax.jit(lambda ts, ys: jax.lax.map(lambda a: one(*a), (ts, ys)))(ts, ys)

    # Inside a loop XLA may fuse the two programs differently: measured at most 2 ulps of
    # the largest entry (4.4e-16 of 2.4); bound 8 ulps. A wrong branch or derivative is O(1).
    for got, want in zip(value_jvp_vjp(wrapped), value_jvp_vjp(field)):
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * np.finfo(float).eps * float(jnp.max(jnp.abs(want))))
    # A NaN time gives a NaN field (nothing hidden behind the conditional).
    assert np.all(np.isnan(np.asarray(jax.jit(wrapped)(jnp.nan, x0))))


def test_solve_with_the_wrapped_field_is_bit_identical_to_plain_diffrax():
    """``rb.integrate`` (wrapped field) against ``diffrax.diffeqsolve`` with the plain field
    and the same controller: the same states, accepted and rejected steps, bit for bit, and
    the wrapper is in the program."""
    ball, ctl, x0, field = _paper_ball_field()
    ts = jnp.linspace(0.0, 5.0, 11)

    def ours(x0):
        sol = rb.integrate(ball, ctl, x0, ts)
        return sol.ys[0], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    def plain(x0):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(lambda t, y, args: field(t, y)), dfx.Dopri8(), ts[0], ts[-1], None, x0,
            saveat=dfx.SaveAt(subs=[dfx.SubSaveAt(ts=ts), dfx.SubSaveAt(t1=True)]),
            stepsize_controller=rb.solve.stepsize_controller(ctl, jnp.asarray(1e-10), jnp.asarray(1e-10)),
            max_steps=rb.solve.DEFAULT_MAX_STEPS, throw=False)
        return sol.ys[0], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    (xs_a, acc_a, rej_a), (xs_b, acc_b, rej_b) = jax.jit(ours)(x0), jax.jit(plain)(x0)
    np.testing.assert_array_equal(xs_a, xs_b)
    assert (int(acc_a), int(rej_a)) == (int(acc_b), int(rej_b))
    assert int(acc_a) > 10 and int(rej_a) > 0  # a real adaptive run, with rejections
    # the wrapper's predicate, t == t (a comparison of a variable with itself)
    own = lambda f: len(re.findall(r"= eq (\w+) \1\n", str(jax.make_jaxpr(f)(x0))))
    assert own(ours) >= 1 and own(plain) == 0
