"""Ellipsoid added mass (Lamb, Hydrodynamics, Arts. 114–115) and the Munk moment (Munk 1924).

Munk moment: a body in ideal fluid with translational added masses m1 (along its axis) <
m3 (broadside) feels, at a tilt θ between its axis and its (constant) impulse Q, the
couple Q²(1/m1 − 1/m3) sin θ cos θ turning it broadside (Munk 1924, NACA Report 184; Lamb,
Hydrodynamics, 6th ed., Ch. VI, on the permanent translations of a solid and their
stability: only the translation along the axis of greatest (total) mass is stable). With Kirchhoff's equations (the SE(3) paper) in the plane of the tilt this is exactly
J θ̈ = ±K sin θ cos θ, K = Q²(m3 − m1)/(m1 m3), J the total transverse moment:

* along the axis (Q = m1 U): θ = 0 is unstable, θ(t) ≈ (ε/σ) sinh(σt), σ² = m1(m3 − m1)U²/(J m3);
* broadside (Q = m3 U): it oscillates, θ(t) ≈ (ε/ω) sin(ωt), ω² = m3(m3 − m1)U²/(J m1),

for an initial pitch rate ε. Here m_i, J include the body's own mass and inertia.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special

import rollball_jax as rb
from rollball_jax import rigid
from rollball_jax.errors import ModelError

EMPTY = rb.ConstantControl([])


def test_carlson_rd_matches_scipy():
    rng = np.random.default_rng(0)
    x, y, z = rng.uniform(1e-3, 1e3, size=(3, 50))
    rd = jax.jit(rigid.carlson_rd)
    np.testing.assert_allclose(rd(x, y, z), scipy.special.elliprd(x, y, z), rtol=1e-14)
    np.testing.assert_allclose(rd(0.0, 2.0, 1.0), scipy.special.elliprd(0.0, 2.0, 1.0), rtol=1e-14)


def test_lamb_coefficients():
    # α0 + β0 + γ0 = 2 (Lamb Art. 114); a sphere has 2/3 each; the prolate closed form agrees
    coef = rigid.ellipsoid_coefficients(1.0, 2.0, 3.0)
    np.testing.assert_allclose(jnp.sum(coef), 2.0, rtol=1e-14)
    np.testing.assert_allclose(rigid.ellipsoid_coefficients(0.7, 0.7, 0.7), [2 / 3] * 3, rtol=1e-14)
    for a, b in [(2.0, 0.5), (1.1, 1.0), (10.0, 1.0)]:
        np.testing.assert_allclose(rigid.ellipsoid_coefficients(a, b, b), rigid.prolate_spheroid_coefficients(a, b),
                                   rtol=1e-11)


def test_added_mass_known_values():
    # sphere: ½ the displaced mass in translation, nothing in rotation (the classical result)
    rho, r = 1.3, 0.8
    fluid_mass = 4 / 3 * np.pi * rho * r**3
    np.testing.assert_allclose(np.diag(rigid.ellipsoid_added_mass(r, r, r, rho)),
                               [fluid_mass / 2] * 3 + [0.0] * 3, rtol=1e-14, atol=1e-15)
    # prolate spheroid: Lamb's rotational formula (Art. 115) against the closed form of
    # Newman, Marine Hydrodynamics (1977), ch. 4: k′ = e⁴(β0 − α0)/((2 − e²)[2e² − (2 − e²)(β0 − α0)]),
    # added moment = k′ · M_f (a² + b²)/5; no added moment about the symmetry axis
    a, b = 2.0, 0.5
    fluid_mass = 4 / 3 * np.pi * a * b * b
    alpha0, beta0, _ = np.asarray(rigid.prolate_spheroid_coefficients(a, b))
    e2 = 1 - (b / a) ** 2
    k_rot = e2**2 * (beta0 - alpha0) / ((2 - e2) * (2 * e2 - (2 - e2) * (beta0 - alpha0)))
    diag = np.diag(rigid.ellipsoid_added_mass(a, b, b))
    coef = np.array([alpha0, beta0, beta0])
    np.testing.assert_allclose(diag[:3], fluid_mass * coef / (2 - coef), rtol=1e-12)
    transverse = k_rot * fluid_mass * (a * a + b * b) / 5
    np.testing.assert_allclose(diag[3:], [0.0, transverse, transverse], rtol=1e-10, atol=1e-15)


def test_added_mass_is_differentiable():
    # jax.grad through Carlson's duplication vs central differences
    f = jax.jit(lambda a: jnp.sum(jnp.diag(rigid.ellipsoid_added_mass(a, 0.6, 0.4, 1.0)) * jnp.arange(1.0, 7.0)))
    g = jax.jit(jax.grad(f))(1.0)
    fd = (f(1.0 + 1e-6) - f(1.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    with pytest.raises(ModelError, match="'b'"):
        rigid.ellipsoid_added_mass(1.0, -0.5, 0.4)


# -- the Munk moment -------------------------------------------------------------------------
A_AXIS, B_AXIS, SPEED = 2.0, 0.5, 1.0


def _spheroid():
    """Neutrally buoyant uniform prolate spheroid (axis E1) and its total masses (m1, m3, J)."""
    fluid_mass = 4 / 3 * np.pi * A_AXIS * B_AXIS**2  # ρ = 1, body density 1
    body = rigid.rigid_body_inertia(fluid_mass, rigid.ellipsoid_inertia(A_AXIS, B_AXIS, B_AXIS, fluid_mass))
    total = np.asarray(body + rigid.ellipsoid_added_mass(A_AXIS, B_AXIS, B_AXIS, 1.0))
    return rigid.Kirchhoff(total), total[0, 0], total[2, 2], total[4, 4]


def _tilt_from_impulse(sol):
    """Angle between the body axis RE1 and the (conserved) spatial impulse Q_s, in [0, π/2]."""
    axis = sol.orientation[:, :, 0]
    q_dir = sol.momentum_spatial / np.linalg.norm(sol.momentum_spatial, axis=1, keepdims=True)
    cos = np.abs(np.sum(axis * q_dir, axis=1))
    sin = np.linalg.norm(np.cross(axis, q_dir), axis=1)
    return np.arctan2(sin, cos)


def test_munk_axial_translation_is_unstable():
    model, m1, m3, inertia = _spheroid()
    eps = 1e-5  # initial pitch rate
    # rtol = atol = 1e-12: the tilt lives in versor components of size ~θ/2 ≥ 1e-6 early on,
    # so atol must sit well below them for a 1e-5 relative comparison
    sol = rb.simulate(model, EMPTY, model.state_from_body(u=[SPEED, 0.0, 0.0], Omega=[0.0, eps, 0.0]),
                      (0.0, 40.0), n_save=201, rtol=1e-12, atol=1e-12)
    tilt = _tilt_from_impulse(sol)
    sigma = SPEED * np.sqrt(m1 * (m3 - m1) / (inertia * m3))
    # linear regime (until the tilt first exceeds 1e-3; cubic terms ≲ θ² ≈ 1e-6 relative):
    # exponential growth at the rate σ of the linearised Munk moment
    first = int(np.argmax(tilt > 1e-3))
    linear = slice(1, first)
    assert first > 20
    np.testing.assert_allclose(tilt[linear], eps / sigma * np.sinh(sigma * sol.ts[linear]), rtol=1e-5)
    assert tilt.max() > 1.5  # grown by > 1e5: it turns broadside (θ → π/2)
    np.testing.assert_allclose(sol.kinetic_energy, sol.kinetic_energy[0], rtol=1e-9)


def test_munk_broadside_translation_oscillates():
    model, m1, m3, inertia = _spheroid()
    eps = 1e-3
    sol = rb.simulate(model, EMPTY, model.state_from_body(u=[0.0, 0.0, SPEED], Omega=[0.0, eps, 0.0]),
                      (0.0, 100.0), n_save=201, rtol=1e-10, atol=1e-10)
    pitch = np.pi / 2 - _tilt_from_impulse(sol)  # the axis' angle out of the broadside plane
    omega = SPEED * np.sqrt(m3 * (m3 - m1) / (inertia * m1))
    amplitude = eps / omega
    assert omega * 100 > 4 * 2 * np.pi  # several periods
    # bounded and equal to the linear oscillation: pendulum amplitude corrections are
    # O(amplitude²) ≈ 1e-6 relative, i.e. a phase error ≈ 1e-6·ωt ≲ 1e-4 over t = 100
    np.testing.assert_allclose(pitch, amplitude * np.abs(np.sin(omega * sol.ts)), atol=1e-4 * amplitude)
    assert pitch.max() <= amplitude * (1 + 1e-4)
