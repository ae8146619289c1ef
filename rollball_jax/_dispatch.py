"""``array_jit``: ``eqx.filter_jit``'s rule at ``jax.jit``'s call cost, for hot entry points.

``eqx.filter_jit`` traces the array leaves of its arguments and treats every other leaf
as static, which is what a model pytree needs (Python callables of ``FunctionRail``,
integers, solver options). Its dispatch partitions the arguments into two pytrees on
every call; measured on the paper ball (2 cores, jax 0.10.2, equinox 0.13), a call of
``rb.simulate``'s compiled solve cost ~0.08 ms more through ``eqx.filter_jit`` than
through ``jax.jit`` of the same function (1.82 vs 1.74 ms). ``array_jit`` applies the same
rule with one ``jax.tree.flatten``: the array leaves are the traced arguments of one
``jax.jit`` and the tree structure with the other leaves is its (hashed) static argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ModelError, concrete

# What eqx.is_array counts as an array (traced); everything else is static.
_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)


def array_jit(fn: Callable) -> Callable:
    """``fn`` compiled like ``eqx.filter_jit(fn)``: array leaves (``jax.Array``, NumPy
    arrays and scalars) of the positional arguments are traced, other leaves are static
    and compared by equality (callables by identity) to select the compiled program; they
    must be hashable, as for ``eqx.filter_jit`` (``jax.jit`` raises ``ValueError`` otherwise)."""

    def flat(key, arrays):
        treedef, mask, statics = key
        it_a, it_s = iter(arrays), iter(statics)
        leaves = [next(it_a) if m else next(it_s) for m in mask]
        return fn(*jax.tree.unflatten(treedef, leaves))

    jitted = jax.jit(flat, static_argnums=0)

    def call(*args: Any):
        leaves, treedef = jax.tree.flatten(args)
        mask = tuple(isinstance(x, _ARRAY_TYPES) for x in leaves)
        statics = tuple(x for x, m in zip(leaves, mask) if not m)
        return jitted((treedef, mask, statics), [x for x, m in zip(leaves, mask) if m])

    call.__wrapped__ = fn
    call.__doc__ = fn.__doc__
    return call


COMPLEX_MESSAGE = ("complex values are not supported: the solves are real (float64), and a complex step would lose "
                   "its imaginary part; differentiate with jax.jacfwd/jax.grad, or use "
                   "rb.jacobians.complex_step_jacobian for the vector field")


def float64_arg(v):
    """``v`` as a float64 argument of a compiled call, never weakly typed (a weak type
    selects a second program): a JAX array (or tracer) of that type as it is, another JAX
    array cast (in NumPy when concrete), anything else converted in NumPy. An eager
    ``jnp.asarray`` costs ~30–50 µs and compiles a small program per new shape; a NumPy
    argument is moved by the compiled call's own dispatch. (For values stored in a model,
    which must be JAX arrays, construction uses :func:`rollball_jax.errors.as_float64`.)"""
    if isinstance(v, jax.Array) and v.dtype == jnp.float64 and not jax.typeof(v).weak_type:
        return v
    host = concrete(v)  # None for a tracer, or a sequence holding one
    if (host is not None and np.iscomplexobj(host)) or (host is None and jnp.iscomplexobj(jnp.asarray(v))):
        raise ModelError(COMPLEX_MESSAGE)  # the cast dropped the imaginary part (a ComplexWarning at most)
    return jnp.asarray(v, dtype=jnp.float64) if host is None else np.asarray(host, dtype=np.float64)
