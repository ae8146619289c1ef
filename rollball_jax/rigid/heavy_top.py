"""Heavy top: a rigid body on a fixed pivot in uniform gravity (Putkaradze & Rogers, Appendix A.1, eq. A.16).

State (7,)::

    x = [q0, q1, q2, q3, Ω1, Ω2, Ω3]

q the versor of Λ (body → spatial, 2.15), Ω the body angular velocity (2.19). The advected
vertical Γ = Λ⁻¹e3 (A.13) is read from q, so its evolution Γ̇ = Γ × Ω (A.16, second line)
holds by construction of q̇ = ½ q Ω♯ (2.21). Body axes at the pivot are principal axes
of the inertia about the pivot. Gravity is −g e3 in the spatial frame.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import ArrayInput

from ..geometry import rotation_matrix
from . import _common
from .free_body import AbstractVersorBody, euler_rhs

__all__ = ["HeavyTop"]


class HeavyTop(AbstractVersorBody):
    """Heavy top (Putkaradze & Rogers, eqs. A.13–A.16, A.31).

    Attributes
    ----------
    mass : ()        m [mass].
    inertia : (3,)   principal moments (d1, d2, d3) about the pivot [mass·length²].
    chi : (3,)       χ, pivot → centre of mass, body frame [length].
    g : ()           gravitational acceleration [length/time²].

    Equations (A.16): 𝕀Ω̇ = (𝕀Ω) × Ω + m g Γ × χ, Γ = Λᵀe3; q̇ = ½ q Ω♯ (2.21).
    Integrals: energy ½⟨𝕀Ω, Ω⟩ + m g⟨χ, Γ⟩ (from the reduced Lagrangian, A.15), ⟨Π, Γ⟩
    with Π = 𝕀Ω (spatial vertical angular momentum), |Γ|² = 1; for the Lagrange top
    (d1 = d2, χ = (0, 0, ℓ)) also Π3 = d3 Ω3.

    Raises ``ModelError`` for a non-positive mass or moments, moments violating the
    triangle inequality, non-finite χ or g, or wrong shapes.
    """

    mass: Inexact[Array, ""]
    inertia: Inexact[Array, "3"]
    chi: Inexact[Array, "3"]
    g: Inexact[Array, ""]

    def __init__(self, mass: ArrayInput, inertia: ArrayInput, chi: ArrayInput, g: ArrayInput = 1.0):
        self.mass = _common.scalar(mass, "mass")
        _common.positive(self.mass, "mass")
        self.inertia = _common.principal_moments(inertia)
        self.chi = _common.vector(chi, "chi")
        self.g = _common.scalar(g, "g")

    @classmethod
    def lagrange(cls, mass, d1, d3, length, g=1.0) -> "HeavyTop":
        """The Lagrange top: symmetric (d1 = d2), centre of mass on the symmetry axis E3."""
        d1, d3, length = (jnp.asarray(v, dtype=jnp.float64) for v in (d1, d3, length))
        return cls(mass, jnp.stack([d1, d1, d3]), jnp.stack([0.0 * length, 0.0 * length, length]), g)

    def vector_field(self, t, x, control=None):
        """ẋ = [½ q Ω♯ (2.21), 𝕀⁻¹((𝕀Ω) × Ω + m g Γ × χ) (A.16)]; Γ = Λ(q)ᵀe3 (A.13)."""
        q, omega = x[:4], x[4:7]
        gamma = rotation_matrix(q)[2]  # Γ = Λᵀ e3 (A.13)
        torque = self.mass * self.g * jnp.cross(gamma, self.chi)  # −(δl/δΓ) ◇ Γ (A.31)
        omega_dot = (euler_rhs(self.inertia, omega) + torque) / self.inertia  # (A.16)
        return jnp.concatenate([_common.q_dot_body(q, omega), omega_dot])

    def observables(self, x, **context) -> dict[str, Array]:
        """Observables of one state.

        Keys: ``orientation`` (3, 3) Λ(q), ``omega_body`` (3,), ``omega_spatial`` (3,),
        ``gamma`` (3,) Γ = Λᵀe3, ``momentum_body`` (3,) Π = 𝕀Ω, ``momentum_spatial`` (3,)
        ΛΠ, ``pi_gamma`` () ⟨Π, Γ⟩, ``gamma_norm2`` () |Γ|², ``energy`` ()
        ½⟨Π, Ω⟩ + m g⟨χ, Γ⟩, ``cm_spatial`` (3,) Λχ (pivot at the origin), ``versor_norm`` ().
        """
        obs = self._rotation_observables(x)
        lam, pi = obs["orientation"], obs["momentum_body"]
        gamma = lam[2]
        return obs | {
            "gamma": gamma,
            "momentum_spatial": lam @ pi,
            "pi_gamma": jnp.dot(pi, gamma),
            "gamma_norm2": jnp.dot(gamma, gamma),
            "energy": obs["energy"] + self.mass * self.g * jnp.dot(self.chi, gamma),
            "cm_spatial": lam @ self.chi,
        }
