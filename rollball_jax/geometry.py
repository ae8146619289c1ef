"""Rotations, quaternions and frames (paper: Putkaradze & Rogers, Appendix 2 and section 7).

Conventions (verified against the paper's figures and equations):

* vectors are ``(..., 3)`` arrays; the hat map is ``hat(a) @ b == a × b``;
* quaternions are ``(..., 4)`` arrays, scalar first, ``q = [q0, q1, q2, q3]`` (2.1);
* a versor ``q`` maps the body frame to the spatial frame: ``Λ(q) v = [q v♯ q⁻¹]♭``
  (2.15), (2.17).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

from ._typing import FloatInput

__all__ = [
    "E3", "matvec", "hat", "vee", "quat_multiply", "quat_conjugate", "sharp", "rotation_matrix",
    "rotation_about_e2", "spherical_to_cartesian", "frisvad_basis", "paper_rail_rotation"
]

E3 = jnp.array([0.0, 0.0, 1.0])


def matvec(a: FloatInput["... m k"], x: FloatInput["... k"]) -> Inexact[Array, "... m"]:
    """``a @ x`` as a sum of ``k`` scaled columns: ``a`` ``(..., m, k)``, ``x`` ``(..., k)``
    (leading axes broadcast), result ``(..., m)``; ``k`` static and small (3 here).

    Used in the vector fields instead of ``@``: XLA:CPU compiles a ``while`` loop (a
    solver's step loop) into one kernel only if the loop holds no ``dot`` operation, and
    a ``dot`` in the field would appear in every loop that evaluates it or its
    derivatives (see :mod:`rollball_jax._xla_flags`)."""
    a, x = jnp.asarray(a), jnp.asarray(x)
    out = a[..., :, 0] * x[..., 0, None]
    for k in range(1, a.shape[-1]):  # a sum of columns: elementwise, no reduction
        out = out + a[..., :, k] * x[..., k, None]
    return out


def hat(a: FloatInput["... 3"]) -> Inexact[Array, "... 3 3"]:
    """Hat map R³ → so(3): ``hat(a) @ b = a × b`` (Putkaradze & Rogers, sec. 5.1)."""
    a = jnp.asarray(a)
    z = jnp.zeros_like(a[..., 0])
    a1, a2, a3 = a[..., 0], a[..., 1], a[..., 2]
    return jnp.stack(
        [
            jnp.stack([z, -a3, a2], axis=-1),
            jnp.stack([a3, z, -a1], axis=-1),
            jnp.stack([-a2, a1, z], axis=-1),
        ],
        axis=-2,
    )


def vee(m: FloatInput["... 3 3"]) -> Inexact[Array, "... 3"]:
    """Inverse of :func:`hat` (takes the antisymmetric part's vector)."""
    m = jnp.asarray(m)
    return 0.5 * jnp.stack(
        [m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]],
        axis=-1,
    )


def quat_multiply(p: FloatInput["... 4"], q: FloatInput["... 4"]) -> Inexact[Array, "... 4"]:
    """Quaternion product ``p q`` (Putkaradze & Rogers, eq. 2.7), scalar-first."""
    p = jnp.asarray(p)
    q = jnp.asarray(q)
    p0, pv = p[..., :1], p[..., 1:]
    q0, qv = q[..., :1], q[..., 1:]
    scalar = p0 * q0 - jnp.sum(pv * qv, axis=-1, keepdims=True)
    vector = p0 * qv + q0 * pv + jnp.cross(pv, qv)
    return jnp.concatenate([scalar, vector], axis=-1)


def quat_conjugate(q: FloatInput["... 4"]) -> Inexact[Array, "... 4"]:
    """Conjugate ``q*`` (2.10); equals ``q⁻¹`` for a versor (2.12)."""
    q = jnp.asarray(q)
    return q * jnp.array([1.0, -1.0, -1.0, -1.0])


def sharp(v: FloatInput["... 3"]) -> Inexact[Array, "... 4"]:
    """``v♯ = [0, v]`` (2.2)."""
    v = jnp.asarray(v)
    return jnp.concatenate([jnp.zeros_like(v[..., :1]), v], axis=-1)


def rotation_matrix(q: FloatInput["... 4"]) -> Inexact[Array, "... 3 3"]:
    """Rotation matrix Λ of a versor, body → spatial (Putkaradze & Rogers, eq. 2.15).

    ``q`` is used as given (no normalisation), exactly as (2.15) is written; for a
    versor that drifted off the unit sphere Λ is then not exactly orthogonal.
    """
    q = jnp.asarray(q)
    q0, q1, q2, q3 = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack(
        [
            jnp.stack(
                [1 - 2 * (q2**2 + q3**2), 2 * (q1 * q2 - q0 * q3), 2 * (q1 * q3 + q0 * q2)], axis=-1
            ),
            jnp.stack(
                [2 * (q1 * q2 + q0 * q3), 1 - 2 * (q1**2 + q3**2), 2 * (q2 * q3 - q0 * q1)], axis=-1
            ),
            jnp.stack(
                [2 * (q1 * q3 - q0 * q2), 2 * (q2 * q3 + q0 * q1), 1 - 2 * (q1**2 + q2**2)], axis=-1
            ),
        ],
        axis=-2,
    )


def rotation_about_e2(phi: FloatInput["..."]) -> Inexact[Array, "... 3 3"]:
    """Disk orientation Λ(φ), rotation by φ about e2 (Putkaradze & Rogers, eq. 5.29)."""
    phi = jnp.asarray(phi)
    c, s = jnp.cos(phi), jnp.sin(phi)
    z, o = jnp.zeros_like(phi), jnp.ones_like(phi)
    return jnp.stack(
        [jnp.stack([c, z, -s], -1), jnp.stack([z, o, z], -1), jnp.stack([s, z, c], -1)], -2
    )


def spherical_to_cartesian(v: FloatInput["... 3"]) -> Inexact[Array, "... 3"]:
    """ς(φ, θ, ρ) = ρ (cos θ cos φ, cos θ sin φ, sin θ) (Putkaradze & Rogers, eq. 7.9).

    ``φ`` is the azimuth, ``θ`` the elevation above the e1–e2 plane, ``ρ`` the length.
    """
    v = jnp.asarray(v)
    phi, theta, rho = v[..., 0], v[..., 1], v[..., 2]
    return jnp.stack(
        [rho * jnp.cos(theta) * jnp.cos(phi), rho * jnp.cos(theta) * jnp.sin(phi), rho * jnp.sin(theta)],
        axis=-1,
    )


def frisvad_basis(n: FloatInput["3"]) -> tuple[Inexact[Array, "3"], Inexact[Array, "3"]]:
    """Frisvad's orthonormal vectors ``(b1, b2)`` completing the unit vector ``n``.

    Frisvad (2012), "Building an orthonormal basis from a 3D unit vector without
    normalization", Listing 2: with ``a = 1/(1 + n_z)``,
    ``b1 = (1 - n_x² a, -n_x n_y a, -n_x)``, ``b2 = (-n_x n_y a, 1 - n_y² a, -n_y)``;
    for ``n_z < -0.9999999``: ``b1 = (0, -1, 0)``, ``b2 = (-1, 0, 0)``.
    """
    n = jnp.asarray(n)
    nx, ny, nz = n[0], n[1], n[2]
    singular = nz < -0.9999999
    # Keep the unused branch finite so that derivatives stay NaN-free.
    a = 1.0 / (1.0 + jnp.where(singular, 0.0, nz))
    b1 = jnp.stack([1.0 - nx**2 * a, -nx * ny * a, -nx])
    b2 = jnp.stack([-nx * ny * a, 1.0 - ny**2 * a, -ny])
    b1 = jnp.where(singular, jnp.array([0.0, -1.0, 0.0]), b1)
    b2 = jnp.where(singular, jnp.array([-1.0, 0.0, 0.0]), b2)
    return b1, b2


def paper_rail_rotation(v: FloatInput["3"]) -> Inexact[Array, "3 3"]:
    """Rail orientation B(ς(v)) of the paper's ball example (Putkaradze & Rogers, eqs. 7.8–7.10).

    Columns ``[n | b2 | -b1]`` with ``n = ς(v)`` and ``(b1, b2)`` from
    :func:`frisvad_basis`: the column order verified against the paper's example (the only
    right-handed choice for which the paper's θ_a puts the system CM above the GC).
    A rail ``(cos θ, 0, sin θ)`` in this frame is ``cos θ n − sin θ b1``.
    """
    n = spherical_to_cartesian(v)
    n = n / jnp.linalg.norm(n)  # ς(v) is a unit vector for ρ = 1, as in (7.10)
    b1, b2 = frisvad_basis(n)
    return jnp.stack([n, b2, -b1], axis=-1)
