"""The abstract interfaces refuse incomplete implementations at construction.

Each base class declares what a subclass must provide as abstract methods: a subclass
that forgets one cannot be instantiated (``TypeError`` naming the method), instead of
failing later, deep inside a jitted solve, with a bare ``NotImplementedError``. A
complete subclass works wherever the package's own ones do.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import design as dz
from rollball_jax import rails, rigid
from rollball_jax.models import AbstractModel


@pytest.mark.parametrize(
    "base, missing",
    [
        (rb.AbstractControl, "__call__"),
        (rb.AbstractForce, "__call__"),
        (rb.AbstractRail, "point"),
        (rails._PlanarRail, "planar"),  # the private base of circles, ellipses and figure eights
        (AbstractModel, "vector_field"),
        (dz.AbstractCostTerm, "raw_residuals"),
        (rigid.AbstractConstraintVector, "__call__"),
        (rigid.AbstractWrench, "__call__"),
        (rigid.AbstractSE3Body, "body_twist"),
    ],
)
def test_incomplete_subclass_is_refused(base, missing):
    class Incomplete(base):
        pass

    with pytest.raises(TypeError, match=missing):
        Incomplete()


def test_complete_user_control_drives_a_solve():
    """A user-written control (only ``__call__``) is a working control: the disk with a
    mass pushed at constant θ̈ = 0.1 from rest moves the mass to θ = 0.05·t² (the rail
    coordinate is prescribed), independently of the dynamics."""

    class Ramp(rb.AbstractControl):
        rate: jnp.ndarray

        def __call__(self, t, x=None):
            return jnp.atleast_1d(self.rate)

    disk = rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0], [rb.CircleRail(0.5)])
    x0 = disk.initial_state(theta=[0.0])
    sol = rb.simulate(disk, Ramp(jnp.asarray(0.1)), x0, (0.0, 2.0), ts=np.linspace(0.0, 2.0, 5), rtol=1e-10, atol=1e-10)
    theta = np.asarray(sol.xs)[:, 0]
    np.testing.assert_allclose(theta, 0.05 * np.linspace(0.0, 2.0, 5) ** 2, rtol=0, atol=1e-9)


def test_model_kind_names_the_system():
    """Labels and result metadata come from the model (``kind``), not from an isinstance
    chain that called every non-ball model a disk."""
    disk = rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0], [rb.CircleRail(0.5)])
    ball = rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], [0.0, 0.0, -0.05], 1.0, [1.0], [rb.CircleRail(0.5)])
    assert (ball.kind, disk.kind) == ("ball", "disk")
    assert rigid.FreeRigidBody([1.0, 2.0, 3.0]).kind == "freerigidbody"
    assert rigid.HeavyTop(1.0, [1.0, 2.0, 3.0], [0.0, 0.0, 0.1]).kind == "heavytop"
    # 2-D vs 3-D figures are the model's own fact (``planar``), not an isinstance switch
    assert disk.planar and not ball.planar and not rigid.FreeRigidBody([1.0, 2.0, 3.0]).planar
