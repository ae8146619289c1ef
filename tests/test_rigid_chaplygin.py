"""Chaplygin ball and top (Putkaradze & Rogers, 5.26; verified convention integrals) over t = 100, jit/vmap/jacfwd.

Tolerance as in test_rigid_free_body.py: drift ≤ 2·N·1e-10·max(1, |I(0)|), N the number of
accepted Dopri8 steps at rtol = atol = 1e-10.
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
Q0 = np.array([0.9, 0.1, -0.3, 0.2]) / np.linalg.norm([0.9, 0.1, -0.3, 0.2])


@eqx.filter_jit
def _integrals(model, xs):
    return jax.vmap(lambda x: rigid.chaplygin_integrals(model, x))(xs)


def _assert_conserved(sol, values, name):
    values = np.asarray(values)
    drift = np.max(np.abs(values - values[0]))
    bound = 2 * sol.stats["num_accepted_steps"] * TOL * max(1.0, abs(values[0]))
    assert drift <= bound, f"{name}: drift {drift:.3g} > bound {bound:.3g}"


def _run(model):
    x0 = model.initial_state(q=Q0, Omega=[1.0, -0.5, 2.0], z=[0.3, -0.1])
    sol = rb.simulate(model, EMPTY, x0, (0.0, 100.0), n_save=201, rtol=TOL, atol=TOL)
    return sol, {k: np.asarray(v) for k, v in _integrals(model, jnp.asarray(sol.xs)).items()}


def test_factory_is_the_static_structure_ball():
    ball = rigid.ChaplyginBall(1.3, 0.8, [0.2, 0.3, 0.4])
    assert isinstance(ball, rb.Ball) and ball.n == 0 and ball.state_size == 9
    np.testing.assert_array_equal(ball.chi0, 0.0)
    with pytest.raises(ModelError, match="chi0"):
        rigid.ChaplyginBall(1.0, 1.0, [0.2, 0.3, 0.4], chi0=[0.0, 0.0, 1.0])
    with pytest.raises(ModelError, match="without moving masses"):
        rigid.chaplygin_integrals(rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[1.0], rails=[rb.CircleRail(0.5)]),
                                  jnp.zeros(11))


def test_chaplygin_ball_integrals():
    # χ0 = 0: E, |K|², ⟨K, Γ⟩ conserved (verified convention), K about the contact point
    sol, integrals = _run(rigid.ChaplyginBall(1.3, 0.8, [0.2, 0.3, 0.4]))
    np.testing.assert_allclose(integrals["energy"], sol.energy, rtol=1e-14)
    for name in ("energy", "K_squared", "K_gamma"):
        _assert_conserved(sol, integrals[name], name)
    assert np.ptp(sol.omega_body, axis=0).max() > 0.1


def test_routh_sphere_energy_and_jellett():
    # Chaplygin top with d1 = d2 and χ0 on E3 (Routh's sphere): E and ⟨K, rΓ + χ0⟩ conserved,
    # while |K|² is not (a check that the test can fail). Same model structure: no recompile.
    sol, integrals = _run(rigid.ChaplyginBall(1.3, 0.8, [0.3, 0.3, 0.4], chi0=[0.0, 0.0, -0.2]))
    _assert_conserved(sol, integrals["energy"], "energy")
    _assert_conserved(sol, integrals["jellett"], "Jellett ⟨K, s⟩")
    assert np.ptp(integrals["K_squared"]) > 1e-2


def test_chaplygin_vmap_and_jacfwd():
    # vmap over the radius; jvp through diffeqsolve of the final contact-point e1 coordinate
    # vs central differences (h = 1e-4: O(h²) + O(1e-11/h) ≈ 1e-7 relative; rtol 1e-5).
    base = rigid.ChaplyginBall(1.3, 0.8, [0.2, 0.3, 0.4])
    x0 = base.initial_state(q=Q0, Omega=[1.0, -0.5, 2.0])

    def final_z1(radius):
        model = eqx.tree_at(lambda m: m.radius, base, radius)
        sol = rb.integrate(model, EMPTY, x0, jnp.array([0.0, 3.0]), rtol=1e-11, atol=1e-11, adjoint=dfx.ForwardMode())
        return sol.ys[0][-1, -2]

    radii = jnp.array([0.7, 0.8, 0.9])
    h = 1e-4
    values, slopes = jax.jit(jax.vmap(lambda p: jax.jvp(final_z1, (p,), (jnp.ones_like(p),))))(
        jnp.concatenate([radii, radii + h, radii - h])
    )
    fd = (values[3:6] - values[6:]) / (2 * h)
    np.testing.assert_allclose(slopes[:3], fd, rtol=1e-5, atol=1e-8)
    assert np.all(np.abs(slopes[:3]) > 1e-2)
