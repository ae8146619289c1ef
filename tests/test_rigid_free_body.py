"""Free rigid body (Putkaradze & Rogers, A.11) and heavy top (A.16): integrals over t = 100, jit/vmap/jacfwd.

Tolerance of every conservation check: Dopri8 at rtol = atol = 1e-10 keeps each accepted
step's local error below ~1e-10·max(1, |x|). A quantity I(x) that is exactly conserved then
drifts by at most ~N·1e-10·|x||∇I| after N accepted steps if every local error pushed it
the same way; for the quadratic integrals here |x||∇I| ≤ 2 max(1, |I|). The bound asserted
is therefore 2·N·tol·max(1, |I(0)|) with N read from the solve (N ≈ 300–700 here).
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import rigid

TOL = 1e-10
EMPTY = rb.ConstantControl([])
Q0 = np.array([0.8, 0.2, -0.3, 0.4]) / np.linalg.norm([0.8, 0.2, -0.3, 0.4])


def _assert_conserved(sol, values, name):
    values = np.asarray(values)
    drift = np.max(np.abs(values - values[0]))
    bound = 2 * sol.stats["num_accepted_steps"] * TOL * max(1.0, np.max(np.abs(values[0])))
    assert drift <= bound, f"{name}: drift {drift:.3g} > bound {bound:.3g}"
    return drift


@pytest.fixture(scope="module")
def free_solution():
    body = rigid.FreeRigidBody([1.0, 2.0, 3.0])
    x0 = body.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6])  # near the unstable middle axis: tumbling
    return rb.simulate(body, EMPTY, x0, (0.0, 100.0), n_save=201, rtol=TOL, atol=TOL)


def test_free_body_integrals(free_solution):
    sol = free_solution
    _assert_conserved(sol, sol.energy, "energy ½⟨𝕀Ω,Ω⟩")
    _assert_conserved(sol, sol.casimir, "|Π|²")
    _assert_conserved(sol, sol.momentum_spatial, "ΛΠ (A.12)")
    _assert_conserved(sol, sol.versor_norm, "|q|")
    # the body really tumbles: Ω changes by O(1) while ΛΠ stays fixed
    assert np.ptp(sol.omega_body[:, 0]) > 0.5


def test_free_body_vector_field_is_a11():
    body = rigid.FreeRigidBody([1.0, 2.0, 3.0])
    rng = np.random.default_rng(0)
    for _ in range(5):
        omega = rng.normal(size=3)
        x = body.initial_state(q=Q0, Omega=omega)
        f = np.asarray(body.vector_field(0.0, x, EMPTY))
        d = np.array([1.0, 2.0, 3.0])
        # Euler's equations written out: d1 Ω̇1 = (d2 − d3) Ω2 Ω3, cyclic
        expected = np.array([(d[1] - d[2]) * omega[1] * omega[2], (d[2] - d[0]) * omega[2] * omega[0],
                             (d[0] - d[1]) * omega[0] * omega[1]]) / d
        np.testing.assert_allclose(f[4:], expected, rtol=1e-14, atol=1e-15)


@pytest.fixture(scope="module")
def top_solutions():
    top = rigid.HeavyTop(1.0, [1.0, 1.5, 2.0], [0.1, -0.2, 0.5], g=1.0)
    lagrange = rigid.HeavyTop.lagrange(1.0, d1=1.0, d3=0.5, length=0.4, g=1.0)
    s1 = rb.simulate(top, EMPTY, top.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6]), (0.0, 100.0),
                     n_save=201, rtol=TOL, atol=TOL)
    # same model structure: reuses the compiled solve
    s2 = rb.simulate(lagrange, EMPTY, lagrange.initial_state(q=Q0, Omega=[0.3, 1.0, 4.0]), (0.0, 100.0),
                     n_save=201, rtol=TOL, atol=TOL)
    return s1, s2


def test_heavy_top_integrals(top_solutions):
    sol, _ = top_solutions
    _assert_conserved(sol, sol.energy, "energy")
    _assert_conserved(sol, sol.pi_gamma, "⟨Π, Γ⟩")
    _assert_conserved(sol, sol.gamma_norm2, "|Γ|²")
    # the spatial vertical component of ΛΠ is ⟨Π, Γ⟩ (Λᵀe3 = Γ)
    np.testing.assert_allclose(sol.momentum_spatial[:, 2], sol.pi_gamma, atol=1e-12)
    assert np.ptp(sol.gamma[:, 2]) > 0.1  # it nutates


def test_lagrange_top_integrals(top_solutions):
    _, sol = top_solutions
    _assert_conserved(sol, sol.energy, "energy")
    _assert_conserved(sol, sol.pi_gamma, "⟨Π, Γ⟩")
    _assert_conserved(sol, sol.gamma_norm2, "|Γ|²")
    _assert_conserved(sol, sol.momentum_body[:, 2], "Π3 (Lagrange top)")
    assert np.ptp(sol.gamma[:, 2]) > 1e-2


def _final_state(model, x0, t1):
    sol = rb.integrate(model, EMPTY, x0, jnp.stack([0.0, t1]), rtol=1e-11, atol=1e-11, adjoint=dfx.ForwardMode())
    return sol.ys[0][-1]


def _values_and_slopes(fn, params):
    """fn and its forward-mode derivative at each of a batch of parameters: one compiled solve."""
    return jax.jit(jax.vmap(lambda p: jax.jvp(fn, (p,), (jnp.ones_like(p),))))(params)


def _check_against_central_differences(fn, params, h, rtol, atol):
    """jacfwd of ``fn`` (vmapped over ``params``) against central differences with step ``h``."""
    params = jnp.asarray(params)
    k = params.shape[0]
    values, slopes = _values_and_slopes(fn, jnp.concatenate([params, params + h, params - h]))
    fd = (values[k : 2 * k] - values[2 * k :]) / (2 * h)
    np.testing.assert_allclose(slopes[:k], fd, rtol=rtol, atol=atol)
    return values[:k], slopes[:k], fd


def test_free_body_and_top_vmap_and_jacfwd():
    # vmap over a batch of parameters p (one compiled function): a heavy top of mass p and a
    # free body with d1 = 1 + p. jvp (forward mode) through diffeqsolve of the final Ω1 vs
    # central differences: h = 1e-4 gives O(h²) ≈ 1e-8 truncation and O(1e-11/h) = 1e-7
    # solver noise, so rtol 1e-5.
    top = rigid.HeavyTop(1.0, [1.0, 1.5, 2.0], [0.1, -0.2, 0.5])
    free = rigid.FreeRigidBody([2.0, 2.0, 2.5])
    x0 = top.initial_state(q=Q0, Omega=[0.3, 1.0, -0.6])

    def final_omega1(p):
        top_p = eqx.tree_at(lambda m: m.mass, top, p)
        free_p = eqx.tree_at(lambda m: m.inertia, free, free.inertia.at[0].set(1.0 + p))
        return jnp.stack([_final_state(top_p, x0, 3.0)[4], _final_state(free_p, x0, 3.0)[4]])

    values, slopes, fd = _check_against_central_differences(final_omega1, [0.8, 1.0, 1.2], 1e-4, 1e-5, 1e-8)
    assert np.all(np.abs(slopes) > 1e-3)
    # the free body: reverse-mode grad of the vector field in d1, vmapped over states
    body = rigid.FreeRigidBody([1.0, 2.0, 3.0])
    xs = jnp.stack([body.initial_state(q=Q0, Omega=w) for w in np.random.default_rng(1).normal(size=(4, 3))])

    def omega_dot_squared(d1, x):
        model = eqx.tree_at(lambda m: m.inertia, body, body.inertia.at[0].set(d1))
        return jnp.sum(model.vector_field(0.0, x, EMPTY)[4:] ** 2)

    batched = jax.jit(jax.vmap(omega_dot_squared, in_axes=(None, 0)))
    g = jax.jit(jax.vmap(jax.grad(omega_dot_squared), in_axes=(None, 0)))(1.0, xs)
    fd = (batched(1.0 + 1e-6, xs) - batched(1.0 - 1e-6, xs)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)
