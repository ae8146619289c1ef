"""Observables of a state: orientation, positions in both frames, energy (Putkaradze & Rogers, sec. 4, 5.1).

All functions take one state ``x`` (paper ordering) and return arrays for that instant;
vmap them over time (``Solution`` does). Frames: "body" means the body frame translated
to the geometric centre (GC); "spatial" is the inertial frame whose e1–e2 plane passes
through the GC (the GC has height 0, the contact point CP height −r).

For the disk the GC position is z = z_a − r(φ − φ_a) (5.41): pass the initial values.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

__all__ = ["observables", "energy", "Kinematics", "mass_positions_body", "system_cm_body", "to_spatial"]


class Kinematics:
    """θ, θ̇, Λ, Ω and the GC (spatial, (3,)) of one state, from the model's own
    ``kinematics(x, **context)`` (``Ball``: (7.1), (2.15); ``Disk``: (5.29), (5.30), (5.41))."""

    def __init__(self, model, x, z_a=0.0, phi_a=0.0):
        kin = getattr(model, "kinematics", None)
        if kin is None:
            raise TypeError(f"no observables for model type {type(model).__name__}: it has no 'kinematics'")
        self.theta, self.theta_dot, self.orientation, self.omega, self.gc = kin(x, z_a=z_a, phi_a=phi_a)


def mass_positions_body(model, x, z_a=0.0, phi_a=0.0) -> Inexact[Array, "n 3"]:
    """ζ_i(θ_i): each point mass in the body frame translated to the GC, ``(n, 3)``."""
    k = Kinematics(model, x, z_a, phi_a)
    return model.rails.positions(k.theta)


def _all_positions_body(model, theta):
    m = jnp.concatenate([model.m0[None], model.masses])
    zeta = jnp.concatenate([model.chi0[None], model.rails.positions(theta)])
    return m, zeta


def system_cm_body(model, x, z_a=0.0, phi_a=0.0) -> Inexact[Array, "3"]:
    """Total system CM Σ m_i ζ_i / M (i = 0…n, ζ0 = χ0), body frame at the GC, ``(3,)``."""
    k = Kinematics(model, x, z_a, phi_a)
    m, zeta = _all_positions_body(model, k.theta)
    return jnp.sum(m[:, None] * zeta, axis=0) / jnp.sum(m)


def to_spatial(model, x, v_body, z_a=0.0, phi_a=0.0):
    """Spatial position z_GC + Λ v of body-frame-at-GC points ``v`` ``(..., 3)``."""
    k = Kinematics(model, x, z_a, phi_a)
    return k.gc + jnp.einsum("ij,...j->...i", k.orientation, v_body)


def energy(model, x, z_a=0.0, phi_a=0.0) -> Inexact[Array, ""]:
    """Total energy T + V (Putkaradze & Rogers, eqs. 5.3, 5.4), V relative to the GC's height.

    T = ½ Σ m_i |Y_i|² + ½ ⟨Ω, 𝕀Ω⟩ with body velocities Y_i = Ω × (rΓ + ζ_i) + θ̇_i ζ′_i
    (rolling: the GC moves with Ω × rΓ, 5.23), V = g Σ m_i ⟨ζ_i, Γ⟩; sums over i = 0…n.

    Conservation checks: states that ``simulate`` saves between two steps come from the
    solver's dense output (an interpolant), whose error can exceed the step-end error by
    an order of magnitude and more, so an energy drift read at save times overstates the
    solver's own drift. Measured with fixed masses at tol 1e-10, t ∈ [0, 20] (three random
    balls of ``tests/test_ball.py``): relative range of E at ``simulate``'s 401 save times
    2e-9 – 8.7e-9, at step ends (``rb.trajectory``, whose save times are step stops, 21 of
    them) 5e-11 – 2.7e-10. Paper ball, Ω(0) = (0.3, −0.2, 0.5), t ∈ [0, 50], 501 save times:
    3.4e-7 at tol 1e-8, 7.0e-9 at tol 1e-10.
    """
    k = Kinematics(model, x, z_a, phi_a)
    zeta, dzeta, _ = model.rails.evaluate(k.theta)
    m = jnp.concatenate([model.m0[None], model.masses])
    zeta = jnp.concatenate([model.chi0[None], zeta])
    zeta_dot = jnp.concatenate([jnp.zeros((1, 3)), k.theta_dot[:, None] * dzeta])
    gamma = k.orientation[2]
    r = model.radius
    y = jnp.cross(k.omega, r * gamma + zeta) + zeta_dot
    inertia = model.rotational_inertia
    kinetic = 0.5 * jnp.sum(m * jnp.sum(y * y, axis=-1)) + 0.5 * jnp.dot(k.omega, inertia * k.omega)
    potential = model.g * jnp.sum(m * (zeta @ gamma))
    return kinetic + potential


def observables(model, x, z_a=0.0, phi_a=0.0) -> dict[str, Array]:
    """All standard observables of one state, as a dict of arrays.

    Keys: ``gc`` (3,), ``contact_point`` (3,), ``orientation`` (3, 3) (Λ, body → spatial),
    ``omega_body`` (3,), ``omega_spatial`` (3,), ``masses_body`` (n, 3),
    ``masses_spatial`` (n, 3), ``cm_body`` (3,), ``cm_spatial`` (3,), ``energy`` ().
    """
    k = Kinematics(model, x, z_a, phi_a)
    m, zeta_all = _all_positions_body(model, k.theta)
    cm_body = jnp.sum(m[:, None] * zeta_all, axis=0) / jnp.sum(m)
    masses_body = zeta_all[1:]
    lam = k.orientation
    return {
        "gc": k.gc,
        "contact_point": k.gc - jnp.array([0.0, 0.0, 1.0]) * model.radius,
        "orientation": lam,
        "omega_body": k.omega,
        "omega_spatial": lam @ k.omega,
        "masses_body": masses_body,
        "masses_spatial": k.gc + masses_body @ lam.T,
        "cm_body": cm_body,
        "cm_spatial": k.gc + lam @ cm_body,
        "energy": energy(model, x, z_a, phi_a),
    }
