"""Rails: closed-form ζ′, ζ″ against autodiff and finite differences; grouping; validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax.errors import ModelError

ROT = np.asarray(rb.geometry.paper_rail_rotation(jnp.array([0.4, 0.3, 1.0])))

RAILS = {
    "circle": rb.CircleRail([0.5, 0.7], rotation=ROT, center=[0.1, 0.0, -0.05]),
    "circle_paper": rb.CircleRail.paper([0.95, 0.9], [[0, 0, 1], [np.pi / 4, np.pi / 4, 1]]),
    "ellipse": rb.EllipseRail(0.6, 0.3, rotation=ROT),
    "figure_eight": rb.FigureEightRail([0.6, 0.4], [0.5, 0.2]),
    "spoke": rb.SpokeRail([1.0, 2.0, -0.5], limits=[-0.6, 0.6], center=[0.0, 0.1, 0.0]),
}


@pytest.mark.parametrize("name", sorted(RAILS))
def test_closed_form_derivatives_match_autodiff(name):
    rng = np.random.default_rng(101)
    rail = RAILS[name]
    theta = jnp.asarray(rng.uniform(-4, 4, size=rail.size))
    closed = rail.derivatives(theta)
    auto = rail.derivatives_autodiff(theta)
    for c, a in zip(closed, auto):
        np.testing.assert_allclose(c, a, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", sorted(RAILS))
def test_derivatives_match_central_differences(name):
    rng = np.random.default_rng(102)
    # central differences: truncation O(h²ζ‴) ~ 1e-10 and rounding O(eps/h) ~ 1e-11 at h = 1e-5
    rail = RAILS[name]
    theta = rng.uniform(-4, 4, size=rail.size)
    h = 1e-5
    z = lambda th: np.asarray(rail.zeta(jnp.asarray(th)))
    _, d1, d2 = rail.derivatives(jnp.asarray(theta))
    np.testing.assert_allclose(d1, (z(theta + h) - z(theta - h)) / (2 * h), atol=1e-9)
    np.testing.assert_allclose(d2, (z(theta + h) - 2 * z(theta) + z(theta - h)) / h**2, atol=2e-5)


def test_circle_paper_convention_matches_notes():
    # verified convention: ζ(θ) = r (cos θ n − sin θ b1(n))
    v = np.array([np.pi / 4, np.pi / 4, 1.0])
    n = np.asarray(rb.geometry.spherical_to_cartesian(v))
    b1, _ = rb.geometry.frisvad_basis(n)
    rail = rb.CircleRail.paper(0.85, v)
    th = 0.7044
    np.testing.assert_allclose(rail.zeta(jnp.array([th]))[0], 0.85 * (np.cos(th) * n - np.sin(th) * np.asarray(b1)), atol=1e-15)


def test_function_rail_uses_autodiff():
    def helix_like(theta, p):
        return p["a"] * jnp.array([jnp.cos(theta), jnp.sin(theta) * jnp.cos(theta), 0.3 * jnp.sin(theta)])

    rail = rb.FunctionRail(helix_like, {"a": 0.5})
    th = 0.9
    z, d1, d2 = (np.asarray(v[0]) for v in rail.derivatives(jnp.array([th])))
    a = 0.5
    np.testing.assert_allclose(d1, a * np.array([-np.sin(th), np.cos(2 * th), 0.3 * np.cos(th)]), atol=1e-15)
    np.testing.assert_allclose(d2, a * np.array([-np.cos(th), -2 * np.sin(2 * th), -0.3 * np.sin(th)]), atol=1e-15)


def test_railset_keeps_mass_order_across_kinds():
    a = rb.CircleRail(0.5)
    b = rb.SpokeRail([0, 0, 1.0], [-0.5, 0.5])
    c = rb.CircleRail(0.3, center=[0.0, 0.0, 0.1])
    rs = rb.RailSet([a, b, c])
    assert rs.size == 3 and len(rs.groups) == 2
    theta = jnp.array([0.3, 0.2, -1.1])
    expect = np.stack([a.zeta(theta[:1])[0], b.zeta(theta[1:2])[0], c.zeta(theta[2:])[0]])
    np.testing.assert_allclose(rs.positions(theta), expect, atol=1e-15)
    zeta, d1, _ = rs.evaluate(theta)
    np.testing.assert_allclose(zeta, expect, atol=1e-15)
    np.testing.assert_allclose(d1[1], [0, 0, 1.0])
    masses, spoke = rs.spokes()[0]
    assert list(masses) == [1]


def test_rail_validation_errors():
    with pytest.raises(ModelError, match="radius"):
        rb.CircleRail(-0.1)
    with pytest.raises(ModelError, match="rotation"):
        rb.CircleRail(0.5, rotation=np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(ModelError, match="limits"):
        rb.SpokeRail([1.0, 0, 0], [0.5, -0.5])
    with pytest.raises(ModelError, match="rows"):
        rb.EllipseRail([0.1, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ModelError, match="shape"):
        rb.FunctionRail(lambda th, p: jnp.array([th, th]))
