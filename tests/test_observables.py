"""Observables against the kinematic identities of a rolling rigid body (independent route).

Along the motion, the time derivative of every observable is its JVP along the vector
field (autodiff, no solve). With the masses held on their rails (θ̇ = 0) every mass is a
point of the rigid body, so (Putkaradze & Rogers, sec. 4–5; Λ body → spatial):

* d/dt z_GC = ω × (r e3)                 (rolling without slipping, 5.23 in spatial form)
* d/dt Λ = ω̂ Λ                           (ω = Λ Ω the spatial angular velocity)
* d/dt x_i = ω × (x_i − z_GC) + d/dt z_GC  for every mass and the system CM
* contact point = z_GC − r e3, x_i = z_GC + Λ ζ_i, cm_body = Σ m_i ζ_i / M (i = 0…n).

A transposed Λ (Λᵀ in place of Λ), a body/spatial mix-up of ω or a wrong sign of the
rolling term breaks one of them by O(1) (the states are random, so Λ is far from
symmetric); the identities hold to rounding (measured ≤ 2e-15), bound 1e-12.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb

TOL = 1e-12


def _hat(w):
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _random_ball(gen):
    v = gen.uniform([-np.pi, -1.2, 1.0], [np.pi, 1.2, 1.0], size=(3, 3))
    rails = [rb.CircleRail.paper(gen.uniform(0.3, 0.9), vi) for vi in v]
    return rb.Ball(1.3, 1.1, [0.9, 1.0, 1.2], [0.03, -0.02, -0.1], 1.0, gen.uniform(0.5, 1.5, 3), rails)


def _check(model, x, control, m_all):
    obs_fn = lambda y: model.observables(y)  # noqa: E731
    xdot = model.vector_field(0.0, x, control)
    obs, d = jax.jvp(obs_fn, (x,), (xdot,))
    obs = {k: np.asarray(v) for k, v in obs.items()}
    d = {k: np.asarray(v) for k, v in d.items()}
    lam, w, gc, r = obs["orientation"], obs["omega_spatial"], obs["gc"], float(model.radius)
    e3 = np.array([0.0, 0.0, 1.0])
    assert np.max(np.abs(lam @ lam.T - np.eye(3))) <= TOL
    assert np.max(np.abs(lam - lam.T)) > 1e-2  # a transposed Λ would be caught
    np.testing.assert_allclose(w, lam @ obs["omega_body"], atol=TOL)
    np.testing.assert_allclose(d["gc"], np.cross(w, r * e3), atol=TOL)
    np.testing.assert_allclose(d["orientation"], _hat(w) @ lam, atol=TOL)
    np.testing.assert_allclose(obs["contact_point"], gc - r * e3, atol=TOL)
    np.testing.assert_allclose(obs["masses_spatial"], gc + obs["masses_body"] @ lam.T, atol=TOL)
    for i in range(obs["masses_spatial"].shape[0]):
        np.testing.assert_allclose(d["masses_spatial"][i], np.cross(w, obs["masses_spatial"][i] - gc) + d["gc"], atol=TOL)
    zeta_all = np.concatenate([np.asarray(model.chi0)[None], obs["masses_body"]])
    np.testing.assert_allclose(obs["cm_body"], m_all @ zeta_all / m_all.sum(), atol=TOL)
    np.testing.assert_allclose(obs["cm_spatial"], gc + lam @ obs["cm_body"], atol=TOL)
    np.testing.assert_allclose(d["cm_spatial"], np.cross(w, obs["cm_spatial"] - gc) + d["gc"], atol=TOL)
    np.testing.assert_allclose(obs["masses_body"], np.asarray(model.rails.positions(x[: model.n])), atol=TOL)


@pytest.mark.parametrize("seed", [5, 11])
def test_ball_observables_obey_rigid_rolling_kinematics(seed):
    gen = np.random.default_rng(seed)
    ball = _random_ball(gen)
    q = gen.normal(size=4)
    x = ball.initial_state(theta=gen.uniform(0, 6, 3), q=q / np.linalg.norm(q), Omega=gen.normal(size=3),
                           z=gen.normal(size=2))
    m_all = np.concatenate([[float(ball.m0)], np.asarray(ball.masses)])
    _check(ball, jnp.asarray(x), rb.ConstantControl(np.zeros(3)), m_all)


def test_disk_observables_obey_rigid_rolling_kinematics():
    gen = np.random.default_rng(7)
    rails = [rb.CircleRail(0.6), rb.EllipseRail(0.4, 0.6, center=[0.1, 0.0, -0.05])]
    disk = rb.Disk(1.2, 1.0, 0.9, (0.02, -0.1), 1.0, [0.8, 0.6], rails)
    x = jnp.asarray(disk.initial_state(theta=gen.uniform(0, 6, 2), phi=0.7, phi_dot=-0.4))
    m_all = np.concatenate([[float(disk.m0)], np.asarray(disk.masses)])
    _check(disk, x, rb.ConstantControl(np.zeros(2)), m_all)


@pytest.mark.parametrize("seed", [2, 13])
def test_energy_and_helpers_from_spatial_velocities(seed):
    """E = ½ Σ_{i=0..n} m_i |ẋ_i|² + ½ ⟨Ω, 𝕀Ω⟩ + g Σ m_i (x_i)₃ with the spatial positions
    x_i = z_GC + Λζ_i (ζ_0 = χ0) differentiated along the flow (JVP), masses moving on
    their rails (θ̇ ≠ 0): an independent route to (5.3)/(5.4). Also the standalone helpers
    (``system_cm_body``, ``mass_positions_body``, ``to_spatial``) against the dict."""
    gen = np.random.default_rng(seed)
    ball = _random_ball(gen)
    q = gen.normal(size=4)
    x = jnp.asarray(ball.initial_state(theta=gen.uniform(0, 6, 3), theta_dot=gen.normal(size=3), q=q / np.linalg.norm(q),
                                       Omega=gen.normal(size=3), z=gen.normal(size=2)))
    control = rb.ConstantControl(np.zeros(3))
    chi0 = ball.chi0

    def points(y):  # (n + 1, 3): m0's CM, then the masses
        return jnp.concatenate([rb.observables.to_spatial(ball, y, chi0)[None], ball.observables(y)["masses_spatial"]])

    pos, vel = jax.jvp(points, (x,), (ball.vector_field(0.0, x, control),))
    m_all = np.concatenate([[float(ball.m0)], np.asarray(ball.masses)])
    omega = np.asarray(ball.observables(x)["omega_body"])
    expected = (0.5 * np.sum(m_all * np.sum(np.asarray(vel) ** 2, axis=1)) + 0.5 * omega @ (np.asarray(ball.inertia) * omega)
                + float(ball.g) * np.sum(m_all * np.asarray(pos)[:, 2]))
    np.testing.assert_allclose(float(rb.observables.energy(ball, x)), expected, rtol=1e-12)
    obs = ball.observables(x)
    np.testing.assert_allclose(rb.observables.system_cm_body(ball, x), obs["cm_body"], atol=TOL)
    np.testing.assert_allclose(rb.observables.mass_positions_body(ball, x), obs["masses_body"], atol=TOL)
    np.testing.assert_allclose(obs["energy"], rb.observables.energy(ball, x), atol=TOL)


def test_disk_default_context_is_the_origin():
    """Without a context the disk's GC is z = −r(φ − 0) (5.41 with z_a = φ_a = 0), in every
    helper; a given context shifts it by z_a + r φ_a."""
    disk = rb.Disk(1.2, 0.8, 0.9, (0.02, -0.1), 1.0, [0.8], [rb.CircleRail(0.5)])
    x = jnp.asarray(disk.initial_state(theta=[0.4], phi=0.7, phi_dot=-0.4))
    gc = np.array([-0.8 * 0.7, 0.0, 0.0])
    np.testing.assert_allclose(rb.observables.observables(disk, x)["gc"], gc, atol=TOL)
    np.testing.assert_allclose(rb.observables.to_spatial(disk, x, jnp.zeros(3)), gc, atol=TOL)
    np.testing.assert_allclose(rb.observables.Kinematics(disk, x).gc, gc, atol=TOL)
    # (the other helpers are body-frame quantities or the energy, which do not depend on
    # the GC's position: their context defaults cannot change a value)
    shifted = rb.observables.observables(disk, x, z_a=1.5, phi_a=0.2)["gc"]
    np.testing.assert_allclose(shifted, gc + np.array([1.5 + 0.8 * 0.2, 0.0, 0.0]), atol=TOL)
