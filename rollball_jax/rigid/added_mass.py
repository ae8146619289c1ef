"""Added mass of an ellipsoid in an ideal fluid (Lamb, *Hydrodynamics*, 6th ed. 1932, Arts. 114–115).

A solid ellipsoid with semi-axes (a, b, c) along its body axes (E1, E2, E3), moving through
an unbounded, incompressible, inviscid fluid of density ρ at rest at infinity, gives the
fluid a kinetic energy ½ Vᵀ 𝕄_a V in its body velocities V = (u, Ω); for an ellipsoid
𝕄_a is diagonal (about the centre, principal axes). With the dimensionless integrals
(Lamb Art. 114)

    α0 = abc ∫₀^∞ dλ / ((a² + λ) Δ),  β0, γ0 likewise with b², c²,  Δ = √((a²+λ)(b²+λ)(c²+λ)),

(α0 + β0 + γ0 = 2) and the displaced fluid mass M_f = (4/3)πρabc:

* translation (Art. 114): m11 = α0 / (2 − α0) · M_f, and cyclically m22 (β0), m33 (γ0);
* rotation (Art. 115): j11 = (1/5) M_f (b² − c²)² (γ0 − β0) / [2(b² − c²) + (b² + c²)(β0 − γ0)],
  and cyclically j22 (c, a; α0, γ0), j33 (a, b; β0, α0); j11 = 0 when b = c.

The integrals are Carlson's symmetric elliptic integral R_D: α0 = (2/3) abc R_D(b², c², a²)
(DLMF 19.16.5), evaluated here by Carlson's duplication algorithm (Carlson 1995, Numer.
Algorithms 10, 13–26; DLMF 19.36.2), in pure JAX so that it is jit/vmap/grad-able. For a
prolate spheroid (a > b = c, eccentricity e = √(1 − b²/a²)) they have closed forms
(Lamb Art. 114): α0 = 2(1 − e²)/e³ (½ ln((1 + e)/(1 − e)) − e), β0 = γ0 = 1/e² −
(1 − e²)/(2e³) ln((1 + e)/(1 − e)).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import ArrayInput, FloatInput

from . import _common

__all__ = [
    "ellipsoid_added_mass", "ellipsoid_inertia", "ellipsoid_coefficients", "prolate_spheroid_coefficients",
    "carlson_rd"
]

_DUPLICATIONS = 16  # each step shrinks the spread of (x, y, z) by ~4; the series is O(spread⁶)


@jax.jit  # compiled once per argument shape, also when called eagerly
def carlson_rd(x: FloatInput["..."], y: FloatInput["..."], z: FloatInput["..."]) -> Inexact[Array, "..."]:
    """Carlson's R_D(x, y, z) = (3/2) ∫₀^∞ dt / ((t + z) √((t + x)(t + y)(t + z))) (DLMF 19.16.5).

    x, y ≥ 0 (at most one zero), z > 0. Duplication (DLMF 19.26.18) a fixed number of
    times, then the fifth-order series of DLMF 19.36.2; relative error ~1e-16 for
    arguments within a factor 1e6 of each other.
    """
    x, y, z = jnp.broadcast_arrays(*(jnp.asarray(v, dtype=jnp.float64) for v in (x, y, z)))

    def duplicate(k, carry):  # DLMF 19.26.18; the k-th term of the sum carries 4^-k
        x, y, z, total = carry
        sx, sy, sz = jnp.sqrt(x), jnp.sqrt(y), jnp.sqrt(z)
        lam = sx * sy + sx * sz + sy * sz
        total = total + 0.25**k / (sz * (z + lam))
        return (x + lam) / 4.0, (y + lam) / 4.0, (z + lam) / 4.0, total

    x, y, z, total = jax.lax.fori_loop(0, _DUPLICATIONS, duplicate, (x, y, z, jnp.zeros_like(x)))
    factor = 0.25**_DUPLICATIONS
    a = (x + y + 3.0 * z) / 5.0
    dx, dy = (a - x) / a, (a - y) / a
    dz = -(dx + dy) / 3.0
    e2 = dx * dy - 6.0 * dz**2
    e3 = (3.0 * dx * dy - 8.0 * dz**2) * dz
    e4 = 3.0 * (dx * dy - dz**2) * dz**2
    e5 = dx * dy * dz**3
    series = (
        1.0 - 3.0 / 14.0 * e2 + e3 / 6.0 + 9.0 / 88.0 * e2**2 - 3.0 / 22.0 * e4 - 9.0 / 52.0 * e2 * e3 + 3.0 / 26.0 * e5
    )
    return factor * series / (a * jnp.sqrt(a)) + 3.0 * total


def ellipsoid_coefficients(a: ArrayInput, b: ArrayInput, c: ArrayInput) -> Inexact[Array, "3"]:
    """Lamb's (α0, β0, γ0) of an ellipsoid with semi-axes (a, b, c) (Art. 114), ``(3,)``.

    α0 = (2/3) abc R_D(b², c², a²) and cyclically; dimensionless, α0 + β0 + γ0 = 2.
    """
    a, b, c = (jnp.asarray(v, dtype=jnp.float64) for v in (a, b, c))
    abc = a * b * c
    a2, b2, c2 = a * a, b * b, c * c
    return (2.0 / 3.0) * abc * jnp.stack([carlson_rd(b2, c2, a2), carlson_rd(c2, a2, b2), carlson_rd(a2, b2, c2)])


def prolate_spheroid_coefficients(a: ArrayInput, b: ArrayInput) -> Inexact[Array, "3"]:
    """Closed-form (α0, β0, γ0) of a prolate spheroid, semi-axes (a, b, b), a > b (Lamb Art. 114).

    With e = √(1 − b²/a²) and L = ln((1 + e)/(1 − e)): α0 = 2(1 − e²)/e³ (L/2 − e),
    β0 = γ0 = 1/e² − (1 − e²) L / (2e³).
    """
    a, b = jnp.asarray(a, dtype=jnp.float64), jnp.asarray(b, dtype=jnp.float64)
    e = jnp.sqrt(1.0 - (b / a) ** 2)
    log_ratio = jnp.log((1.0 + e) / (1.0 - e))
    alpha0 = 2.0 * (1.0 - e**2) / e**3 * (0.5 * log_ratio - e)
    beta0 = 1.0 / e**2 - (1.0 - e**2) * log_ratio / (2.0 * e**3)
    return jnp.stack([alpha0, beta0, beta0])


def _rotational_factor(p2, q2, coef_p, coef_q):
    """(p² − q²)² (coef_q − coef_p) / [2(p² − q²) + (p² + q²)(coef_p − coef_q)] (Lamb Art. 115).

    Its limit for p = q is 0; a relative gap below 1e-9 is treated as that limit (keeping
    both branches finite for differentiation).
    """
    d = p2 - q2
    equal = jnp.abs(d) <= 1e-9 * (p2 + q2)
    d_safe = jnp.where(equal, 1.0, d)
    dcoef = jnp.where(equal, 0.0, coef_q - coef_p)
    value = d_safe**2 * dcoef / (2.0 * d_safe - (p2 + q2) * dcoef)
    return jnp.where(equal, 0.0, value)


def ellipsoid_added_mass(a: ArrayInput, b: ArrayInput, c: ArrayInput, density: ArrayInput = 1.0) -> Inexact[Array, "6 6"]:
    """6×6 added-mass matrix diag(m11, m22, m33, j11, j22, j33) of an ellipsoid (Lamb Arts. 114–115).

    Parameters: semi-axes ``a, b, c`` [length] along body E1, E2, E3; fluid ``density`` ρ
    [mass/length³]. Body frame at the ellipsoid's centre; ordering (linear, angular) as in
    :mod:`rollball_jax.rigid.se3`. Add it to the body's own generalised inertia
    (:func:`rollball_jax.rigid.se3.rigid_body_inertia`) to get Kirchhoff's 𝕄.
    Raises ``ModelError`` for non-positive semi-axes or density (concrete values).
    """
    for v, name in ((a, "a"), (b, "b"), (c, "c"), (density, "density")):
        _common.positive(_common.scalar(v, name), name)
    a, b, c, rho = (jnp.asarray(v, dtype=jnp.float64) for v in (a, b, c, density))
    alpha0, beta0, gamma0 = ellipsoid_coefficients(a, b, c)
    fluid_mass = 4.0 / 3.0 * jnp.pi * rho * a * b * c
    coef = jnp.stack([alpha0, beta0, gamma0])
    linear = coef / (2.0 - coef) * fluid_mass  # Art. 114
    a2, b2, c2 = a * a, b * b, c * c
    angular = fluid_mass / 5.0 * jnp.stack(
        [
            _rotational_factor(b2, c2, beta0, gamma0),  # Art. 115
            _rotational_factor(c2, a2, gamma0, alpha0),
            _rotational_factor(a2, b2, alpha0, beta0),
        ]
    )
    return jnp.diag(jnp.concatenate([linear, angular]))


def ellipsoid_inertia(a: ArrayInput, b: ArrayInput, c: ArrayInput, mass: ArrayInput) -> Inexact[Array, "3"]:
    """Principal moments of a uniform solid ellipsoid about its centre: m (b² + c²)/5, … ``(3,)``."""
    a, b, c, m = (jnp.asarray(v, dtype=jnp.float64) for v in (a, b, c, mass))
    return m / 5.0 * jnp.stack([b * b + c * c, c * c + a * a, a * a + b * b])
