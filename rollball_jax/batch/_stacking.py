"""Batches as pytrees: stacking same-structure modules and indexing members."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..errors import ModelError, array_namespace, to_jax


# ======================================================================================
# Stacking
# ======================================================================================


def stack(items: Sequence[Any]) -> Any:
    """Stack same-structure pytrees (models, controls, states) along a new leading axis.

    Raises :class:`ModelError` naming the first member whose structure (number and kinds
    of rails, control type, static fields) differs from member 0.
    """
    items = list(items)
    if not items:
        raise ModelError("cannot stack an empty sequence")
    ref = jax.tree.structure(items[0])
    for i, it in enumerate(items[1:], 1):
        if jax.tree.structure(it) != ref:
            raise ModelError(
                f"member {i} differs in structure from member 0 (number or kinds of rails, control type, "
                "static fields): a batch holds same-structure designs only; group members by structure"
            )
    return jax.tree.map(_stack_leaves, *items)


def _stack_leaves(*xs):
    """``jnp.stack(xs)``; in NumPy when every leaf is concrete (errors.array_namespace: an
    eager ``jnp.stack`` compiles a program per member count and shape)."""
    xp = array_namespace(*xs)
    return to_jax(xp.stack([xp.asarray(x) for x in xs]))


def member(batched: Any, i: int) -> Any:
    """Member ``i`` of a batched pytree (every array leaf indexed on its leading axis)."""
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, batched)


def batch_size(batched: Any) -> int:
    """Length of the leading axis shared by the array leaves of ``batched``."""
    sizes = {int(np.shape(x)[0]) for x in jax.tree.leaves(batched) if eqx.is_array(x) and np.ndim(x) > 0}
    if len(sizes) != 1:
        raise ModelError(f"array leaves do not share one leading batch axis (sizes {sorted(sizes)})")
    return sizes.pop()
