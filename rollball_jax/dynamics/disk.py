"""Rolling disk vector field: ODE (6.2) with φ̈ = κ from (5.40)/(5.38) (Putkaradze & Rogers, sec. 5.4, 6)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import FloatInput
from .._checks import control_value
from .ball import all_masses

__all__ = ["disk_vector_field"]


def disk_vector_field(t, x: FloatInput[" N"], model, control) -> Inexact[Array, " N"]:
    """Right-hand side of the rolling disk ODE (Putkaradze & Rogers, eq. 6.2).

    Parameters
    ----------
    t : ()          time.
    x : (2n+2,)     state [θ, θ̇, φ, φ̇] (6.1); φ is the angle from e1 to E1 (5.29).
    model : Disk
    control : callable t -> u (n,), the prescribed θ̈.

    Returns ẋ = [θ̇, u, φ̇, κ] with (5.40)

        κ = (−r F_e,1 + Σ m_i K_i) / (d2 + Σ m_i [(r sin φ + ζ_i1)² + (r cos φ + ζ_i3)²]),

    K_i of (5.38); the sums include m0 with ζ0 = χ0. The GC moves as z = z_a − r(φ − φ_a) (5.41).
    """
    n = model.n
    theta, theta_dot, phi, phi_dot = x[:n], x[n : 2 * n], x[2 * n], x[2 * n + 1]
    u = control_value(control(t, x), n) if n else jnp.zeros((0,), dtype=x.dtype)
    r = model.radius
    m, zeta, dzeta, ddzeta, td, uu = all_masses(model, theta, theta_dot, u)
    sp, cp = jnp.sin(phi), jnp.cos(phi)
    z1, z3 = zeta[:, 0], zeta[:, 2]
    dz1, dz3 = dzeta[:, 0], dzeta[:, 2]
    ddz1, ddz3 = ddzeta[:, 0], ddzeta[:, 2]
    a1 = r * sp + z1  # s_i,1 (5.35)
    a3 = r * cp + z3  # s_i,3
    k_i = (
        (model.g + r * phi_dot**2) * (z3 * sp - z1 * cp)
        + a3 * (-2.0 * phi_dot * td * dz3 + td**2 * ddz1 + uu * dz1)
        - a1 * (2.0 * phi_dot * td * dz1 + td**2 * ddz3 + uu * dz3)
    )  # (5.38)
    numerator = -r * model.force(t)[0] + jnp.sum(m * k_i)
    denominator = model.d2 + jnp.sum(m * (a1**2 + a3**2))
    phi_ddot = numerator / denominator  # (5.40)
    return jnp.concatenate([theta_dot, u, jnp.stack([phi_dot, phi_ddot])])
