"""Free rigid body: Euler's equations (Putkaradze & Rogers, Appendix A.1, eq. A.11), orientation as a versor.

A rigid body turning freely about its fixed centre of mass. State (7,)::

    x = [q0, q1, q2, q3, Ω1, Ω2, Ω3]

q the versor of Λ (body → spatial, scalar first, 2.15), Ω the body angular velocity
(2.19) [rad/time]. Frames: body axes are the principal axes, so 𝕀 = diag(d1, d2, d3).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import ArrayInput

from ..geometry import rotation_matrix
from ..models import AbstractModel
from . import _common

__all__ = ["FreeRigidBody", "AbstractVersorBody", "euler_rhs"]


def euler_rhs(inertia: Inexact[Array, "3"], omega: Inexact[Array, "3"]) -> Inexact[Array, "3"]:
    """(𝕀Ω) × Ω, the right-hand side of 𝕀Ω̇ in (A.11) (−ad*_Ω of the momentum, A.25)."""
    return jnp.cross(inertia * omega, omega)


class AbstractVersorBody(AbstractModel):
    """A rigid body whose state is x = [q, Ω] ``(7,)``: the versor (body → spatial, 2.15)
    and the body angular velocity. Shares the state layout, labels, ``initial_state`` and
    the kinematic observables; subclasses give ``inertia`` ``(3,)`` and the vector field."""

    inertia: eqx.AbstractVar[Inexact[Array, "3"]]

    @property
    def state_size(self) -> int:
        return 7

    @property
    def versor_index(self) -> int:
        """q0 is x[0] (checked to be unit in every solve's initial state)."""
        return 0

    def state_labels(self) -> list[str]:
        return _common.orientation_labels() + ["Omega1", "Omega2", "Omega3"]

    def initial_state(self, q: ArrayInput = _common.IDENTITY_VERSOR, Omega: ArrayInput = (0.0, 0.0, 0.0)) -> Inexact[Array, "7"]:
        """x = [q, Ω]; ``q`` must be a unit quaternion (``ModelError`` otherwise)."""
        return jnp.concatenate([_common.versor(q), _common.vector(Omega, "Omega")])

    def _rotation_observables(self, x) -> dict[str, Array]:
        """``orientation`` Λ(q) (q as given), ``omega_body`` Ω, ``omega_spatial`` ΛΩ,
        ``momentum_body`` 𝕀Ω, ``energy`` ½⟨𝕀Ω, Ω⟩, ``versor_norm`` |q|."""
        q, omega = x[:4], x[4:7]
        lam = rotation_matrix(q)
        pi = self.inertia * omega
        return {
            "orientation": lam,
            "omega_body": omega,
            "omega_spatial": lam @ omega,
            "momentum_body": pi,
            "energy": 0.5 * jnp.dot(pi, omega),
            "versor_norm": jnp.linalg.norm(q),
        }


class FreeRigidBody(AbstractVersorBody):
    """Free rigid body, Euler–Poincaré form (Putkaradze & Rogers, eqs. A.10–A.12).

    Attributes
    ----------
    inertia : (3,)  principal moments (d1, d2, d3) about the centre of mass [mass·length²].

    Equations: Ω̇ = 𝕀⁻¹[(𝕀Ω) × Ω] (A.11), q̇ = ½ q Ω♯ (2.21).
    Integrals: energy ½⟨𝕀Ω, Ω⟩, Casimir |Π|² with Π = 𝕀Ω, and the spatial angular
    momentum π = ΛΠ (A.12, the conservation law form).

    Raises ``ModelError`` for non-positive moments or moments violating the triangle
    inequality (checked on concrete values only, as for :class:`rollball_jax.Ball`).
    """

    inertia: Inexact[Array, "3"]

    def __init__(self, inertia: ArrayInput):
        self.inertia = _common.principal_moments(inertia)

    def vector_field(self, t, x, control=None):
        """ẋ = [½ q Ω♯ (2.21), 𝕀⁻¹((𝕀Ω) × Ω) (A.11)]; ``t`` and ``control`` are unused."""
        q, omega = x[:4], x[4:7]
        omega_dot = euler_rhs(self.inertia, omega) / self.inertia  # (A.11)
        return jnp.concatenate([_common.q_dot_body(q, omega), omega_dot])

    def observables(self, x, **context) -> dict[str, Array]:
        """Observables of one state.

        Keys: ``orientation`` (3, 3) Λ(q) (2.15, q used as given), ``omega_body`` (3,) Ω,
        ``omega_spatial`` (3,) ΛΩ, ``momentum_body`` (3,) Π = 𝕀Ω, ``momentum_spatial`` (3,)
        ΛΠ (A.12), ``casimir`` () |Π|², ``energy`` () ½⟨Π, Ω⟩, ``versor_norm`` () |q|.
        """
        obs = self._rotation_observables(x)
        pi = obs["momentum_body"]
        return obs | {"momentum_spatial": obs["orientation"] @ pi, "casimir": jnp.dot(pi, pi)}
