"""Suslov's problem (Putkaradze & Rogers, A.34–A.38): constraint ⟨Ω, ξ⟩ = 0 and energy over t = 100.

Tolerances as in test_rigid_free_body.py: Dopri8 at rtol = atol = 1e-10, N accepted steps,
drift ≤ 2·N·1e-10·max(1, |I(0)|). For the constraint (zero at t0) the scale is |Ω||ξ|.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import rigid
from rollball_jax.errors import ModelError

TOL = 1e-10
EMPTY = rb.ConstantControl([])
Q0 = np.array([0.8, 0.2, -0.3, 0.4]) / np.linalg.norm([0.8, 0.2, -0.3, 0.4])
INERTIA = [1.0, 2.0, 3.0]


def _rotating_xi(t, rate):
    """ξ(t) turning about E3 at ``rate`` [rad/time] and tilted out of the E1–E2 plane."""
    return jnp.array([jnp.cos(rate * t), jnp.sin(rate * t), 0.5 + 0.0 * t])


@eqx.filter_jit
def _xi_values(model, ts):
    return jax.vmap(model.xi)(ts)


def _bound(sol, scale):
    return 2 * sol.stats["num_accepted_steps"] * TOL * max(1.0, scale)


@pytest.fixture(scope="module")
def constant_xi_solution():
    model = rigid.Suslov(INERTIA, [0.2, 0.5, 1.0])  # ξ not along a principal axis: Ω evolves
    x0 = model.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6], project=True)
    return model, rb.simulate(model, EMPTY, x0, (0.0, 100.0), n_save=201, rtol=TOL, atol=TOL)


@pytest.fixture(scope="module")
def moving_xi_solution():
    model = rigid.Suslov(INERTIA, rigid.FunctionVector(_rotating_xi, 0.3))
    x0 = model.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6], project=True)
    return model, rb.simulate(model, EMPTY, x0, (0.0, 100.0), n_save=201, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("case", ["constant_xi_solution", "moving_xi_solution"])
def test_constraint_and_energy(case, request):
    model, sol = request.getfixturevalue(case)
    c = model.constraint_values(sol.ts, sol.xs)
    xi_norm = np.linalg.norm(np.asarray(_xi_values(model, jnp.asarray(sol.ts))), axis=1).max()
    omega_norm = np.linalg.norm(sol.omega_body, axis=1).max()
    assert np.max(np.abs(c)) <= _bound(sol, omega_norm * xi_norm), np.max(np.abs(c))
    # the reaction λξ is orthogonal to Ω, so ½⟨𝕀Ω, Ω⟩ is conserved (for moving ξ as well)
    e = sol.energy
    assert np.max(np.abs(e - e[0])) <= _bound(sol, abs(e[0])), np.max(np.abs(e - e[0]))
    assert np.max(np.abs(sol.versor_norm - 1.0)) <= _bound(sol, 1.0)
    assert np.ptp(sol.omega_body, axis=0).max() > 0.1  # the body's rotation really changes


def test_multiplier_keeps_constraint_rate_zero():
    # (A.37) is chosen so that d/dt ⟨Ω, ξ⟩ = ⟨Ω̇, ξ⟩ + ⟨Ω, ξ̇⟩ = 0: an identity of the vector
    # field (ξ̇ by jax.jvp), checked to rounding at random states and times.
    model = rigid.Suslov(INERTIA, rigid.FunctionVector(_rotating_xi, 0.7))
    rng = np.random.default_rng(2)
    for _ in range(10):
        t = rng.uniform(0, 10)
        x = model.initial_state(q=Q0, Omega=rng.normal(size=3), t0=t, project=True)
        omega_dot = model.vector_field(t, x, EMPTY)[4:]
        xi, xi_dot = jax.jvp(model.xi, (jnp.asarray(t),), (jnp.asarray(1.0),))
        rate = jnp.dot(omega_dot, xi) + jnp.dot(x[4:], xi_dot)
        assert abs(rate) <= 1e-14 * (1 + float(jnp.linalg.norm(omega_dot))), rate
        # and with a constant ξ the multiplier is (A.37) without the ξ̇ term
    const = rigid.Suslov(INERTIA, [0.2, 0.5, 1.0])
    x = const.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6], project=True)
    omega = x[4:]
    d, xi = jnp.asarray(INERTIA), jnp.array([0.2, 0.5, 1.0])
    lam = -jnp.dot(jnp.cross(d * omega, omega), xi / d) / jnp.dot(xi, xi / d)
    np.testing.assert_allclose(const.multiplier(0.0, x), lam, rtol=1e-14)


def test_initial_state_checks_constraint():
    model = rigid.Suslov(INERTIA, [0.0, 0.0, 1.0])
    with pytest.raises(ModelError, match="constraint"):
        model.initial_state(Omega=[0.0, 1.0, 0.5])
    x = model.initial_state(Omega=[0.0, 1.0, 0.5], project=True)
    np.testing.assert_allclose(x[4:], [0.0, 1.0, 0.0])
    with pytest.raises(ModelError, match="non-zero"):
        rigid.Suslov(INERTIA, [0.0, 0.0, 0.0])
    with pytest.raises(ModelError, match="shape"):
        rigid.Suslov(INERTIA, rigid.FunctionVector(lambda t, p: jnp.zeros(2), None))


def test_suslov_vmap_and_jacfwd():
    # vmap over the turning rate of ξ(t) (the parameter enters through ξ and, by jax.jvp,
    # through ξ̇ in the multiplier); jvp through diffeqsolve vs central differences
    # (h = 1e-4: O(h²) + O(1e-11/h) ≈ 1e-7 relative, compared at rtol 1e-5).
    def final_omega(rate):
        model = rigid.Suslov(INERTIA, rigid.FunctionVector(_rotating_xi, rate))
        x0 = model.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6], project=True)
        sol = rb.integrate(model, EMPTY, x0, jnp.array([0.0, 4.0]), rtol=1e-11, atol=1e-11,
                           adjoint=dfx.ForwardMode())
        return sol.ys[0][-1, 5]

    rates = jnp.array([0.2, 0.3, 0.4])
    h = 1e-4
    batch = jnp.concatenate([rates, rates + h, rates - h])
    values, slopes = jax.jit(jax.vmap(lambda p: jax.jvp(final_omega, (p,), (jnp.ones_like(p),))))(batch)
    fd = (values[3:6] - values[6:]) / (2 * h)
    np.testing.assert_allclose(slopes[:3], fd, rtol=1e-5, atol=1e-8)
    assert np.all(np.abs(slopes[:3]) > 1e-3)
