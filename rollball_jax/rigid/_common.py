"""Shared helpers of the rigid-body models: parameter checks, versor kinematics, state parts.

Conventions are those of :mod:`rollball_jax.geometry` (Putkaradze & Rogers, Appendix 2): versors are
scalar first and map the body frame to the spatial frame, Λ = Λ(q) by (2.15); the body
angular velocity Ω = (Λᵀ Λ̇)^∨ (2.19) moves the versor by q̇ = ½ q Ω♯ (2.21), and the
spatial angular velocity ω = ΛΩ (with Λ̇ = ω̂ Λ) by q̇ = ½ ω♯ q.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact

from .._typing import ArrayInput

from .. import _checks as checks
from .._checks import positive, principal_moments  # noqa: F401  (shared with the Ball; used as _common.*)
from ..errors import ModelError, concrete
from ..geometry import quat_multiply, sharp

IDENTITY_VERSOR = (1.0, 0.0, 0.0, 0.0)


def scalar(x: ArrayInput, name: str) -> Inexact[Array, ""]:
    """``x`` as a float64 scalar; ``ModelError`` if not a finite scalar."""
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.shape != ():
        raise ModelError(f"'{name}' must be a scalar; got shape {x.shape}")
    finite(x, name)
    return x


def vector(x: ArrayInput, name: str, size: int = 3) -> Inexact[Array, " size"]:
    """``x`` as a float64 array of shape ``(size,)``; ``ModelError`` otherwise or if not finite."""
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.shape != (size,):
        raise ModelError(f"'{name}' must have shape ({size},); got {x.shape}")
    finite(x, name)
    return x


def finite(x, name: str) -> None:
    v = concrete(x)
    if v is not None and not np.all(np.isfinite(v)):
        raise ModelError(f"'{name}' must be finite; got {np.asarray(v).tolist()}")


def versor(q: ArrayInput, name: str = "q") -> Inexact[Array, "4"]:
    """A unit quaternion ``(4,)``: |q| = 1 to within ``checks.VERSOR_TOL``, the rule of
    :meth:`rollball_jax.Ball.initial_state` and of every solve's initial state
    (``ModelError`` otherwise)."""
    q = vector(q, name, 4)
    qv = concrete(q)
    if qv is not None:
        checks.versor(np.asarray(qv), name)
    return q


def q_dot_body(q: Inexact[Array, "4"], omega_body: Inexact[Array, "3"]) -> Inexact[Array, "4"]:
    """q̇ = ½ q Ω♯ with Ω the body angular velocity (Putkaradze & Rogers, eq. 2.21)."""
    return 0.5 * quat_multiply(q, sharp(omega_body))


def q_dot_spatial(q: Inexact[Array, "4"], omega_spatial: Inexact[Array, "3"]) -> Inexact[Array, "4"]:
    """q̇ = ½ ω♯ q with ω = ΛΩ the spatial angular velocity (2.21 with Ω♯ = q⁻¹ ω♯ q, 2.17)."""
    return 0.5 * quat_multiply(sharp(omega_spatial), q)


def orientation_labels() -> list[str]:
    return ["q0", "q1", "q2", "q3"]
