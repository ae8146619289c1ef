"""No NaN/inf derivatives at points that look singular.

Points: ball at rest (Ω = 0) at the identity orientation with its masses at rest; a spoke
rail through the centre at θ = 0 (ζ = 0) with χ0 = 0; a figure-eight rail at its crossing
(ζ = 0); paper-convention rails (7.8–7.10) whose normal is +e3 or −e3 (Frisvad's branch
switch at n_z = −1, geometry.frisvad_basis) and just off it; the disk at rest. Derivatives:
jacfwd and jacrev of the vector field with respect to the state and to every parameter leaf,
of the rail-orientation angles v through Frisvad's construction, and jacfwd of a short
``rb.integrate`` solve (across the control's kinks) with respect to parameters, with and
without the versor projection.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import make_paper_disk
from rollball_jax.projection import VersorProjection

E3_UP = [0.0, np.pi / 2, 1.0]  # ς(v) = +e3
E3_DOWN = [0.0, -np.pi / 2, 1.0]  # ς(v) = −e3: Frisvad's special branch
NEAR_DOWN = [0.3, -np.pi / 2 + 1e-3, 1.0]  # n_z = −0.9999995: regular branch, a = 1/(1+n_z) ≈ 2e6


def _ball(v_up=E3_UP, v_down=E3_DOWN, chi0=(0.0, 0.0, 0.0)):
    rails = [
        rb.SpokeRail([0.0, 0.0, 1.0], [-0.5, 0.5]),  # through the centre: ζ(0) = 0
        rb.FigureEightRail(0.5, 0.4),  # crosses itself at ζ(π/2) = 0
        rb.CircleRail.paper(0.6, v_up),
        rb.CircleRail.paper(0.5, v_down),
    ]
    return rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], chi0, 1.0, [0.4, 0.5, 0.6, 0.7], rails)


def _rest_state(model):
    # masses at rest at θ = (0, π/2, 0, 0), identity orientation, Ω = 0, at the origin
    return model.initial_state(theta=[0.0, np.pi / 2, 0.0, 0.0])


def _finite(tree):
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(tree) if eqx.is_array(x)]
    return leaves and all(np.all(np.isfinite(x)) for x in leaves)


@eqx.filter_jit
def _state_jacobians(model, ctl, t, x):
    f = lambda y: model.vector_field(t, y, ctl)  # noqa: E731
    return jax.jacfwd(f)(x), jax.jacrev(f)(x)


@eqx.filter_jit
def _param_jacobians(params, static, t, x):
    def f(p):
        model, ctl = eqx.combine(p, static)
        return model.vector_field(t, x, ctl)

    return jax.jacfwd(f)(params), jax.jacrev(f)(params)


MODELS = {
    "ball with singular-looking rails": lambda: (_ball(), rb.PaperStep.ball(4)),
    "same, rails just off n = -e3": lambda: (_ball(v_down=NEAR_DOWN), rb.PaperStep.ball(4)),
    "paper disk": lambda: (make_paper_disk(), rb.PaperStep.disk(4)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_vector_field_derivatives_finite_at_rest(name):
    model, ctl = MODELS[name]()
    x = _rest_state(model) if isinstance(model, rb.Ball) else model.initial_state(theta=[0.0, np.pi / 2, np.pi, 0.0])
    for t in (0.0, 0.1, 0.5):  # inside, at a kink of u (7.11), after the ramp (u = 0)
        f = model.vector_field(jnp.asarray(t), x, ctl)
        assert np.all(np.isfinite(f))
        j_fwd, j_rev = _state_jacobians(model, ctl, jnp.asarray(t), x)
        assert _finite(j_fwd) and _finite(j_rev), name
        np.testing.assert_allclose(j_fwd, j_rev, rtol=1e-12, atol=1e-12)
        params, static = eqx.partition((model, ctl), eqx.is_inexact_array)
        p_fwd, p_rev = _param_jacobians(params, static, jnp.asarray(t), x)
        assert _finite(p_fwd) and _finite(p_rev), name


def _vf_of_v(v, x):
    """f at x of the ball whose last rail has paper orientation B(ς(v)) (7.10), built inside."""
    return _ball(v_down=v).vector_field(jnp.asarray(0.05), x, rb.PaperStep.ball(4))


_frisvad_jacobians = jax.jit(lambda v, x: (jax.jacfwd(_vf_of_v)(v, x), jax.jacrev(_vf_of_v)(v, x)))


@pytest.mark.parametrize("v", [E3_UP, E3_DOWN, NEAR_DOWN], ids=["n=+e3", "n=-e3", "n_z=-0.9999995"])
def test_derivative_through_frisvad_basis_finite(v):
    # f depends on the spherical angles v through B(ς(v)) (7.10): differentiate through the
    # construction of the rail (model built inside the differentiated function).
    x = _rest_state(_ball())
    x = x.at[8 + 4 : 8 + 7].set(jnp.array([0.3, -0.2, 0.1]))  # some Ω, so that B enters f at first order
    j_fwd, j_rev = _frisvad_jacobians(jnp.asarray(v), x)
    assert j_fwd.shape == (17, 3)
    assert _finite(j_fwd) and _finite(j_rev)
    np.testing.assert_allclose(j_fwd, j_rev, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("project", [False, True], ids=["Dopri8", "VersorProjection(Dopri8)"])
def test_forward_sensitivity_of_short_solve_finite(project):
    # d x(0.3) / d(m0, rail radius, figure-eight a, spoke direction, control amplitude) from rest,
    # across the kinks t = 0.1, 0.2, by forward mode through diffeqsolve.
    base = _ball()
    solver = VersorProjection(dfx.Dopri8(), base) if project else dfx.Dopri8()
    x0 = _rest_state(base)
    ts = jnp.array([0.0, 0.15, 0.3])

    @jax.jit
    def final_state(p):
        m0, a8, radius, direction, amplitude = p
        model = eqx.tree_at(
            lambda m: (m.m0, m.rails.groups[1].a, m.rails.groups[2].radius, m.rails.groups[0].direction),
            base, (m0, a8, radius, direction),
        )
        ctl = rb.PaperStep.ball(4, amplitude=amplitude)
        sol = rb.integrate(model, ctl, x0, ts, rtol=1e-9, atol=1e-9, solver=solver, adjoint=dfx.ForwardMode())
        return sol.ys[0][-1]

    groups = base.rails.groups
    p0 = (base.m0, groups[1].a, groups[2].radius, groups[0].direction, jnp.asarray(1.0))
    jac = jax.jacfwd(final_state)(p0)
    assert _finite(jac)
    d_amp = np.asarray(jac[4])
    # θ(0.3) − θ(0) = amplitude · ∫∫ ramp (7.11), with ramp ≥ 0: ∂θ_i/∂amplitude > 0
    assert np.all(d_amp[:4] > 0)
    assert np.any(np.abs(np.asarray(jac[0])) > 0)  # the ball responds to m0
