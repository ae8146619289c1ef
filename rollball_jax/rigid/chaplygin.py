"""Chaplygin ball and top: the rolling ball with static internal structure (Putkaradze & Rogers, eq. 5.26).

A ball of radius r rolling without slipping on a horizontal plane, its mass m0 centred
at χ0 from the geometric centre (GC), with no moving masses. This is
:class:`rollball_jax.Ball` with ``masses=None``; the factory :func:`ChaplyginBall` builds
it under its classical name and :func:`chaplygin_integrals` evaluates its integrals.
State (9,), as (7.1) with n = 0: x = [q0, q1, q2, q3, Ω1, Ω2, Ω3, z1, z2].

* χ0 = 0 (Chaplygin's ball, 1903): the energy E, |K|² and ⟨K, Γ⟩ are conserved, with
  K = 𝕀Ω + m0 s × (Ω × s), s = rΓ, the angular momentum about the contact point
  (verified independently in the tests).
* χ0 ≠ 0 (a "Chaplygin top"): only E is conserved in general; |K|² and ⟨K, Γ⟩ are
  still reported (with s = rΓ + χ0, contact point → centre of mass) but drift. For
  Routh's sphere (d1 = d2, χ0 on the E3 axis) Jellett's integral ⟨K, s⟩ is conserved
  as well (Jellett 1872; Borisov & Mamaev 2002, Regul. Chaotic Dyn. 7(2), 177–200);
  ``tests/test_rigid_chaplygin.py`` checks it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import ArrayInput

from ..dynamics.ball import ball_state_split
from ..errors import ModelError
from ..forces import AbstractForce
from ..geometry import rotation_matrix
from ..models import Ball
from ..observables import energy as _ball_energy

__all__ = ["ChaplyginBall", "chaplygin_integrals"]


def ChaplyginBall(
    m0: ArrayInput,
    radius: ArrayInput,
    inertia: ArrayInput,
    chi0: ArrayInput = (0.0, 0.0, 0.0),
    g: ArrayInput = 1.0,
    force: AbstractForce | None = None,
) -> Ball:
    """The rolling ball with static internal structure (5.26): ``Ball`` with no point masses.

    Parameters
    ----------
    m0 : ()         mass [mass].
    radius : ()     r [length].
    inertia : (3,)  principal moments (d1, d2, d3) about the centre of mass [mass·length²].
    chi0 : (3,)     χ0, GC → centre of mass, body frame (default 0: Chaplygin's ball).
    g : ()          gravitational acceleration; gravity is −g e3 (spatial).
    force : AbstractForce, optional  external force at the GC, spatial frame (5.21).

    Returns a :class:`rollball_jax.Ball` (``n = 0``); simulate it with the empty control
    ``ConstantControl([])``. Raises ``ModelError`` as ``Ball`` does.
    """
    return Ball(m0, radius, inertia, chi0, g, masses=None, rails=(), force=force)


def chaplygin_integrals(model: Ball, x: Inexact[Array, " N"]) -> dict[str, Array]:
    """Energy and the Chaplygin integrals of one state of a ball without moving masses.

    Returns ``energy`` () (T + V, 5.3–5.4), ``K`` (3,) = 𝕀Ω + m0 s × (Ω × s) with
    s = rΓ + χ0 (body frame; angular momentum about the contact point), ``K_squared`` ()
    |K|², ``K_gamma`` () ⟨K, Γ⟩ (Γ = Λᵀe3) and ``jellett`` () ⟨K, s⟩. For χ0 = 0 the
    energy, |K|² and ⟨K, Γ⟩ are integrals; for Routh's sphere the energy and ⟨K, s⟩.
    Raises ``ModelError`` for a ball with moving masses. Pure: vmap it over a trajectory.
    """
    if model.n != 0:
        raise ModelError(f"chaplygin_integrals needs a ball without moving masses; this one has {model.n}")
    _, _, q, omega, _ = ball_state_split(x, 0)
    gamma = rotation_matrix(q)[2]
    s = model.radius * gamma + model.chi0
    k = model.inertia * omega + model.m0 * jnp.cross(s, jnp.cross(omega, s))
    return {
        "energy": _ball_energy(model, x),
        "K": k,
        "K_squared": jnp.dot(k, k),
        "K_gamma": jnp.dot(k, gamma),
        "jellett": jnp.dot(k, s),
    }
