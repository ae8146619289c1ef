"""Bad rigid-body parameters raise ModelError at construction, naming the parameter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import rigid
from rollball_jax.errors import ModelError

GOOD6 = np.asarray(rigid.rigid_body_inertia(1.0, [0.5, 0.6, 0.7], [0.1, 0.0, 0.0]))


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: rigid.FreeRigidBody([1.0, -2.0, 3.0]), "inertia"),
        (lambda: rigid.FreeRigidBody([1.0, 1.0, 3.0]), "triangle"),
        (lambda: rigid.FreeRigidBody([1.0, 2.0]), "shape"),
        (lambda: rigid.FreeRigidBody([1.0, np.nan, 1.0]), "inertia"),
        (lambda: rigid.HeavyTop(0.0, [1.0, 1.0, 1.0], [0.0, 0.0, 1.0]), "mass"),
        (lambda: rigid.HeavyTop(1.0, [1.0, 1.0, 1.0], [0.0, 1.0]), "chi"),
        (lambda: rigid.HeavyTop(1.0, [1.0, 1.0, 1.0], [0.0, 0.0, 1.0], g=np.inf), "'g'"),
        (lambda: rigid.Suslov([1.0, 1.0, 1.0], [0.0, 0.0]), "xi"),
        (lambda: rigid.Kirchhoff(GOOD6[:5, :5]), r"\(6, 6\)"),
        (lambda: rigid.Kirchhoff(GOOD6 + np.triu(np.ones((6, 6)), 1) * 1e-3), "symmetric"),
        (lambda: rigid.NewtonEuler(GOOD6 - 2.0 * np.eye(6)), "positive definite"),
        (lambda: rigid.Lagrange(np.diag([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])), "positive definite"),
        (lambda: rigid.Kirchhoff(GOOD6, wrench=[0.0, 0.0, 1.0]), "AbstractWrench"),
        (lambda: rigid.ConstantWrench([1.0, 0.0]), "force"),
        (lambda: rigid.ConstantWrench(frame="world"), "frame"),
        (lambda: rigid.ellipsoid_added_mass(1.0, 1.0, 1.0, density=0.0), "density"),
        (lambda: rigid.rigid_body_inertia(1.0, np.eye(2)), "inertia"),
    ],
)
def test_construction_errors(build, match):
    with pytest.raises(ModelError, match=match):
        build()


def test_initial_state_errors():
    with pytest.raises(ModelError, match="unit length"):
        rigid.FreeRigidBody([1.0, 2.0, 2.5]).initial_state(q=[1.0, 0.1, 0.0, 0.0])
    with pytest.raises(ModelError, match="Omega"):
        rigid.HeavyTop(1.0, [1.0, 1.0, 1.0], [0.0, 0.0, 1.0]).initial_state(Omega=[1.0, 2.0])
    with pytest.raises(ModelError, match="unit length"):
        rigid.Kirchhoff(GOOD6).state_from_body(q=[2.0, 0.0, 0.0, 0.0])
    with pytest.raises(ModelError, match="'x0' must have length 13"):
        rb.simulate(rigid.Kirchhoff(GOOD6), rb.ConstantControl([]), np.zeros(7), (0.0, 1.0))
    with pytest.raises(ModelError, match="'mass' must be positive"):
        rigid.rigid_body_inertia(-1.0, [1.0, 1.0, 1.0])
    # a control with outputs for a body without masses is refused, not ignored (while tracing)
    body = rigid.FreeRigidBody([1.0, 2.0, 2.5])
    with pytest.raises(ModelError, match=r"control returns u of shape \(1,\) but the model has 0 masses"):
        rb.simulate(body, rb.ConstantControl([0.0]), body.initial_state(), (0.0, 1.0))


@pytest.mark.parametrize("model", [
    rigid.FreeRigidBody([1.0, 2.0, 2.5]),
    rigid.HeavyTop(1.0, [1.0, 1.5, 2.0], [0.0, 0.0, 0.3], g=9.81),
    rigid.Kirchhoff(GOOD6), rigid.NewtonEuler(GOOD6), rigid.Lagrange(GOOD6),
], ids=lambda m: type(m).__name__)
def test_every_solve_refuses_a_non_unit_versor(model):
    """A solve's initial versor must be a unit quaternion for the rigid bodies as for the
    ball (they used none of the ball's check: a heavy top from |q| = 0.954 ran, its |Γ|²
    drifting over 0.71-1.0, and q = 0 ran too). Refused before anything is compiled; the
    same rule (within 1e-6) as the builders' ``initial_state``, which accepted only 1e-8."""
    assert model.versor_index == 0
    x0 = np.asarray(model.initial_state())
    for q in ([0.9, 0.3, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0 + 2e-6, 0.0, 0.0, 0.0]):
        with pytest.raises(ModelError, match=r"'x0\[0:4\] \(q\)': the versor .* must have unit length"):
            rb.simulate(model, rb.ConstantControl([]), np.r_[q, x0[4:]], (0.0, 1.0))
    assert np.all(np.isfinite(model.initial_state(q=[1.0 + 5e-7, 0.0, 0.0, 0.0])))  # within the tolerance


def test_traced_parameters_skip_value_checks():
    # Under jit/vmap the checks run on the concrete model only (as for Ball): building a
    # model from a tracer must not raise.
    @jax.jit
    def rate(d1):
        return rigid.FreeRigidBody(jnp.stack([d1, 2.0, 2.5])).vector_field(0.0, jnp.array([1.0, 0, 0, 0, 1.0, 1.0, 1.0]), None)

    assert np.all(np.isfinite(rate(1.0)))
    labels = rigid.NewtonEuler(GOOD6).state_labels()
    assert labels[:7] == ["q0", "q1", "q2", "q3", "b1", "b2", "b3"] and labels[7:10] == ["xi1", "xi2", "xi3"]
