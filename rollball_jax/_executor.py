"""``own_executor``: run a vector field in its own XLA:CPU thunk executor.

XLA's CPU runtime executes the operations ("thunks") of a compiled computation, and of each
loop body and conditional branch, with one ``ThunkExecutor`` per computation. An executor
runs its thunks one after the other in the calling thread only if every buffer any of them
touches is at most 512 bytes (or the thunks form a chain, or there are at most 8 of them;
``ThunkExecutor::Options`` in XLA, fixed in the jaxlib we test, no flag). Otherwise it runs
them as a dataflow graph, paying tens of nanoseconds of bookkeeping per thunk.

A Runge–Kutta loop always touches a large buffer: diffrax's Dopri8 keeps its 14 stages of a
15-state ball in one (14, 15) array (1,680 bytes), and the solve's save buffer is larger.
So the vector field, evaluated inside those loops, ran its ~30 thunks in dataflow mode.
Wrapped in a ``lax.cond`` (a conditional branch gets its own executor), the field only
touches its own small buffers and runs sequentially. The predicate ``t == t`` is true for
every time the solver passes (XLA cannot fold it: it is false for NaN), and a NaN time
gives a NaN field, so nothing is hidden.

Measured (2 cores, jax/jaxlib 0.10.2, paper examples over [0, 20], ``jax.jit`` of
``rb.integrate``, median of 300 calls, three rounds): ball (tol 1e-10) 1.63-1.67 →
1.29-1.33 ms, disk (tol 1e-12) 1.30-1.36 → 1.14-1.17 ms; accepted and rejected steps and
states bit-identical; compile 1.06 → 0.87 s (ball). See ``benchmarks/README.md``.

Only on the CPU backend: other backends get the field unwrapped (a conditional on a GPU
reads its predicate back to the host).

Under ``jax.vmap`` with per-member times the predicate is batched and JAX evaluates both
branches and selects (the NaN branch is one fill): no gain there, and none lost.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax


def own_executor(field: Callable) -> Callable:
    """A vector field ``field(t, y) -> ẏ`` (``ẏ`` of ``y``'s shape and dtype) wrapped so
    that XLA:CPU runs it in its own sequential executor (see the module docstring). Same
    values, same derivatives (JAX differentiates through ``lax.cond``); a NaN ``t`` gives a
    NaN ``ẏ``."""

    if jax.default_backend() != "cpu":
        return field

    def wrapped(t, y):
        return lax.cond(t == t, lambda: field(t, y), lambda: jnp.full_like(y, jnp.nan))

    return wrapped
