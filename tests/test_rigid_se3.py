"""Free rigid body on SE(3), the SE(3) paper, : Kirchhoff, Newton–Euler and Lagrange velocity coordinates.

* The three vector fields are one flow written in three coordinates: an identity checked
  to rounding at random states (chain rule of the coordinate change).
* Integrated from the same initial condition they give the same curve (R(t), b(t)) to
  ≤ 1e-9 over t = 100 with |b| up to ~37 (rtol = atol = 1e-13: each solve's global error
  is then ~1e-10; at 1e-12 it reaches ~2e-9 in b by t = 100).
* Kirchhoff's integrals (energy, spatial momentum, spatial angular momentum about the
  fixed origin) at rtol = atol = 1e-10 over t = 100: drift ≤ 2·N·1e-10·scale, N accepted
  steps, scale = the size of the terms making up the quantity (for Γ_Ω = RΓ_O + b × RQ,
  |Γ_Ω| + max|b|·|Q|: a momentum error δQ shows up with lever arm |b|).
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import rigid

EMPTY = rb.ConstantControl([])
FORMULATIONS = (rigid.Kirchhoff, rigid.NewtonEuler, rigid.Lagrange)
Q0 = np.array([0.8, 0.2, -0.3, 0.4]) / np.linalg.norm([0.8, 0.2, -0.3, 0.4])
B0, U0, W0 = [0.3, -0.1, 0.5], [0.5, -0.2, 0.3], [0.7, -1.1, 0.4]


def _general_inertia():
    """A rigid body with its CM off O plus a full symmetric positive semi-definite coupling."""
    m = rigid.rigid_body_inertia(2.0, [0.5, 0.7, 0.9], cm=[0.1, -0.2, 0.3])
    a = 0.2 * np.random.default_rng(0).normal(size=(6, 6))
    return np.asarray(m) + a @ a.T


def _fluid_body(density=0.5):
    """Uniform ellipsoid (mass 2) with its CM off the centre O, in a fluid: 𝕄 = body + added mass."""
    axes = (1.0, 0.6, 0.4)
    body = rigid.rigid_body_inertia(2.0, rigid.ellipsoid_inertia(*axes, 2.0), cm=[0.05, 0.0, -0.1])
    return body + rigid.ellipsoid_added_mass(*axes, density)


def _wrenches():
    """Weight at the CM, equal buoyancy at O (a righting couple) and a body-fixed torque."""
    return (rigid.GravityWrench(1.5, [0.1, 0.0, -0.2]), rigid.GravityWrench(-1.5),
            rigid.ConstantWrench(torque=[0.0, 0.05, 0.02], frame="body"))


def _in_kirchhoff_coordinates(model, t, x):
    """The state mapped to Kirchhoff's [q, b, u, Ω] and ẋ pushed through that map (jax.jvp)."""

    def to_kirchhoff(y):
        _, b, u, omega = model.body_twist(y)
        return jnp.concatenate([y[:4], b, u, omega])

    return jax.jvp(to_kirchhoff, (x,), (model.vector_field(t, x, EMPTY),))


def test_vector_fields_are_one_flow():
    # Map each state to the Kirchhoff coordinates (u, Ω) and push the vector field through
    # that map's derivative: all three must give Kirchhoff's ẋ to rounding.
    inertia6 = _general_inertia()
    models = [cls(inertia6, _wrenches()) for cls in FORMULATIONS]
    rng = np.random.default_rng(5)
    for _ in range(5):
        q = rng.normal(size=4)
        args = (q / np.linalg.norm(q), rng.normal(size=3), rng.normal(size=3), rng.normal(size=3))
        t = rng.uniform(0, 5)
        x_ref, reference = _in_kirchhoff_coordinates(models[0], t, models[0].state_from_body(*args))
        for model in models[1:]:
            x, pushed = _in_kirchhoff_coordinates(model, t, model.state_from_body(*args))
            np.testing.assert_allclose(x, x_ref, atol=1e-14)
            np.testing.assert_allclose(pushed, reference, rtol=1e-12, atol=1e-12 * np.max(np.abs(reference)))


@pytest.fixture(scope="module")
def agreement_solutions():
    inertia6 = _general_inertia()
    sols = []
    for cls in FORMULATIONS:
        model = cls(inertia6, _wrenches())
        x0 = model.state_from_body(Q0, B0, U0, W0)
        sols.append(rb.simulate(model, EMPTY, x0, (0.0, 100.0), n_save=201, rtol=1e-13, atol=1e-13))
    return sols


def test_three_formulations_same_motion(agreement_solutions):
    kirchhoff, *others = agreement_solutions
    assert np.ptp(kirchhoff.position, axis=0).max() > 1.0  # it moves and turns over t = 100
    assert np.ptp(kirchhoff.orientation[:, 0, 0]) > 1.0
    for sol in others:
        d_rot = np.max(np.abs(sol.orientation - kirchhoff.orientation))
        d_pos = np.max(np.abs(sol.position - kirchhoff.position))
        assert d_rot <= 1e-9 and d_pos <= 1e-9, (type(sol.model).__name__, d_rot, d_pos)
        # and the same velocities, read back in body components
        np.testing.assert_allclose(sol.velocity_body, kirchhoff.velocity_body, atol=1e-9)
        np.testing.assert_allclose(sol.omega_body, kirchhoff.omega_body, atol=1e-9)


def _drift(values):
    values = np.asarray(values)
    return np.max(np.abs(values - values[0]))


def test_kirchhoff_integrals_of_a_body_in_fluid():
    model = rigid.Kirchhoff(_fluid_body())
    sol = rb.simulate(model, EMPTY, model.state_from_body(Q0, B0, [0.2, -0.1, 0.15], W0), (0.0, 100.0),
                      n_save=201, rtol=1e-10, atol=1e-10)
    budget = 2 * sol.stats["num_accepted_steps"] * 1e-10
    e0 = sol.energy[0]
    q_norm = np.linalg.norm(sol.momentum_spatial[0])
    lever = np.max(np.linalg.norm(sol.position, axis=1))
    assert _drift(sol.energy) <= budget * max(1.0, e0)
    assert _drift(sol.momentum_spatial) <= budget * max(1.0, q_norm)
    gamma_scale = np.linalg.norm(sol.angular_momentum_spatial[0]) + lever * q_norm
    assert _drift(sol.angular_momentum_spatial) <= budget * max(1.0, gamma_scale)
    assert np.ptp(sol.omega_body, axis=0).max() > 0.1 and lever > 5.0


def test_kirchhoff_with_gravity_and_buoyancy():
    # Conservative wrench (weight at the CM, buoyancy at O, both vertical): T + V, the
    # horizontal spatial momentum and the vertical angular momentum about the origin are
    # conserved; the vertical momentum changes at the net weight (here 0.3).
    model = rigid.Kirchhoff(_fluid_body(), (rigid.GravityWrench(1.8, [0.05, 0.0, -0.1]), rigid.GravityWrench(-1.5)))
    sol = rb.simulate(model, EMPTY, model.state_from_body(Q0, B0, [0.2, -0.1, 0.15], W0), (0.0, 100.0),
                      n_save=201, rtol=1e-10, atol=1e-10)
    budget = 2 * sol.stats["num_accepted_steps"] * 1e-10
    q_scale = max(1.0, np.abs(sol.momentum_spatial).max())
    lever = np.max(np.linalg.norm(sol.position, axis=1))
    assert _drift(sol.energy) <= budget * max(1.0, np.abs(sol.kinetic_energy).max())
    assert _drift(sol.momentum_spatial[:, :2]) <= budget * q_scale
    assert _drift(sol.angular_momentum_spatial[:, 2]) <= budget * max(1.0, lever * q_scale)
    # Q̇_s,3 = −(net weight): linear in time to the solver's accuracy
    np.testing.assert_allclose(sol.momentum_spatial[:, 2] - sol.momentum_spatial[0, 2], -0.3 * sol.ts,
                               atol=budget * q_scale)


@pytest.mark.slow
def test_se3_vmap_and_jacfwd():
    # One compiled function: the three formulations, vmapped over the fluid density ρ (which
    # enters through Lamb's added mass, i.e. Carlson's R_D), differentiated by jvp through
    # diffeqsolve. The derivatives of the final position agree with central differences
    # (h = 1e-4: O(h²) + O(1e-11/h) ≈ 1e-7 relative; rtol 1e-5) and across formulations.
    def final_positions(density):
        inertia6 = _fluid_body(density)
        out = []
        for cls in FORMULATIONS:
            model = cls(inertia6)
            sol = rb.integrate(model, EMPTY, model.state_from_body(Q0, B0, U0, W0), jnp.array([0.0, 3.0]),
                               rtol=1e-11, atol=1e-11, adjoint=dfx.ForwardMode())
            out.append(sol.ys[0][-1, 4:7])
        return jnp.stack(out)

    dens = jnp.array([0.3, 0.5, 0.8])
    h = 1e-4
    values, slopes = jax.jit(jax.vmap(lambda p: jax.jvp(final_positions, (p,), (jnp.ones_like(p),))))(
        jnp.concatenate([dens, dens + h, dens - h])
    )
    fd = (values[3:6] - values[6:]) / (2 * h)
    np.testing.assert_allclose(slopes[:3], fd, rtol=1e-5, atol=1e-8)
    for k in (1, 2):
        np.testing.assert_allclose(slopes[:3, k], slopes[:3, 0], rtol=1e-7, atol=1e-10)
    assert np.max(np.abs(slopes[:3])) > 1e-2
