"""Batches as pytrees: stacking same-structure modules and indexing members."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ModelError, concrete, to_device


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
    """``jnp.stack(xs)``; by NumPy when every leaf is concrete (an eager ``jnp.stack``
    compiles a program per member count and shape, ~5–10 ms each on the CPU)."""
    vs = [concrete(x) for x in xs]
    if any(v is None for v in vs):
        return jnp.stack([jnp.asarray(x) for x in xs])
    return to_device(np.stack(vs))


def member(batched: Any, i: int) -> Any:
    """Member ``i`` of a batched pytree (every array leaf indexed on its leading axis)."""
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, batched)


def batch_size(batched: Any) -> int:
    """Length of the leading axis shared by the array leaves of ``batched``."""
    sizes = {int(np.shape(x)[0]) for x in jax.tree.leaves(batched) if eqx.is_array(x) and np.ndim(x) > 0}
    if len(sizes) != 1:
        raise ModelError(f"array leaves do not share one leading batch axis (sizes {sorted(sizes)})")
    return sizes.pop()
