"""Prescribed accelerations u(t) = θ̈(t): paper steps (6.6)/(7.11), knots profiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax.errors import ModelError


def paper_u(t):
    # (6.6)/(7.11) exactly as printed
    return 1.0 if t <= 0.1 else (-10 * t + 2 if t <= 0.2 else 0.0)


@pytest.mark.parametrize("t", [0.0, 0.05, 0.1, 0.13, 0.2, 0.5, 19.0])
def test_paper_steps(t):
    np.testing.assert_allclose(rb.PaperStep.ball(3)(t), [paper_u(t)] * 3, atol=1e-15)
    np.testing.assert_allclose(rb.PaperStep.disk(4)(t), [-paper_u(t), paper_u(t), -paper_u(t), paper_u(t)], atol=1e-15)


def test_paper_step_kinks():
    np.testing.assert_allclose(rb.PaperStep.ball(2).kink_times, [0.1, 0.2])


def test_piecewise_linear():
    c = rb.PiecewiseLinearControl([0.0, 1.0, 3.0], [[0.0, 2.0, -2.0], [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(c(0.5), [1.0, 1.0])
    np.testing.assert_allclose(c(2.0), [0.0, 1.0])
    np.testing.assert_allclose(c(5.0), [-2.0, 1.0])  # held beyond the last knot
    np.testing.assert_allclose(c.kink_times, [0.0, 1.0, 3.0])


def test_cubic_spline_interpolates_and_is_natural():
    knots = np.array([0.0, 0.5, 1.5, 2.0, 3.0])
    values = np.array([[0.0, 1.0, -1.0, 0.5, 0.0], [1.0, 2.0, 0.0, 1.0, 3.0]])
    c = rb.CubicSplineControl(knots, values)
    for k, t in enumerate(knots):
        np.testing.assert_allclose(c(t), values[:, k], atol=1e-14)
    u2 = jax.jacfwd(jax.jacfwd(c))
    np.testing.assert_allclose(u2(0.0), 0.0, atol=1e-12)  # natural end conditions
    np.testing.assert_allclose(u2(3.0 - 1e-12), 0.0, atol=1e-9)
    # C² across an interior knot
    np.testing.assert_allclose(u2(0.5 - 1e-9), u2(0.5 + 1e-9), atol=1e-6)


def test_cubic_spline_matches_scipy():
    scipy_interp = pytest.importorskip("scipy.interpolate")
    knots = np.array([0.0, 0.4, 1.0, 2.5, 3.0])
    values = np.array([[0.3, -1.0, 2.0, 0.0, 1.0]])
    ours = rb.CubicSplineControl(knots, values)
    ref = scipy_interp.CubicSpline(knots, values[0], bc_type="natural")
    for t in np.linspace(0, 3, 17):
        np.testing.assert_allclose(ours(t)[0], ref(t), atol=1e-13)


def test_spline_gradient_in_knot_values():
    knots = jnp.linspace(0.0, 1.0, 6)
    values = jnp.sin(jnp.arange(6.0))[None]

    def f(v):
        return rb.CubicSplineControl(knots, v)(0.37)[0]

    g = jax.grad(f)(values)
    h = 1e-6
    fd = np.array([(f(values.at[0, k].add(h)) - f(values.at[0, k].add(-h))) / (2 * h) for k in range(6)])
    np.testing.assert_allclose(g[0], fd, atol=1e-9)


def test_control_validation():
    with pytest.raises(ModelError, match="increasing"):
        rb.PiecewiseLinearControl([0.0, 0.0, 1.0], [[1.0, 2.0, 3.0]])
    with pytest.raises(ModelError, match="shape"):
        rb.CubicSplineControl([0.0, 1.0, 2.0], [[1.0, 2.0]])
    with pytest.raises(ModelError, match="t_a < t_b"):
        rb.PaperStep([1.0], t_a=0.3, t_b=0.2)
