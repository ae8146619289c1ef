"""Small dense linear algebra used inside the vector fields."""

import jax.numpy as jnp


def solve3(a, b):
    """Solve the 3×3 system ``a x = b`` by the adjugate (Cramer's rule).

    Cheaper than a pivoted LU for one tiny matrix inside jitted/vmapped code. Used only
    for the ball's system matrix, which is negative definite for valid models (so
    ``det(a) ≠ 0``), hence well-posed without pivoting.
    """
    c0 = jnp.cross(a[1], a[2])
    c1 = jnp.cross(a[2], a[0])
    c2 = jnp.cross(a[0], a[1])
    det = jnp.sum(a[0] * c0)  # not jnp.dot: see geometry.matvec
    # adj(a) = [c0 c1 c2] (columns), a^{-1} = adj / det
    return (c0 * b[0] + c1 * b[1] + c2 * b[2]) / det
