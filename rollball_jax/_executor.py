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
every time the solver passes (XLA cannot fold it: it is false for NaN); a NaN time gives a
NaN field. Only when JAX's default backend is the CPU (read when the solve is traced): a
conditional on a GPU reads its predicate back to the host. (``lax.platform_dependent``
would choose by the platform a program is lowered for, but it traces and differentiates
the field twice: the spline-knot and backsolve gradient tests took 54-57 s with it
against 46-49 s, one process, alternating runs. So a computation placed on the CPU of a
machine whose default backend is a GPU runs unwrapped, as before.)

Measured (2 cores, jax/jaxlib 0.10.2, paper examples over [0, 20], ``jax.jit`` of
``rb.integrate``, median of 300 calls, three rounds in one process): ball (tol 1e-10)
1.63-1.67 → 1.29-1.33 ms, disk (tol 1e-12) 1.30-1.36 → 1.14-1.17 ms; compile 1.06 →
0.87 s (ball). Unbatched forward solves are bit-identical (states, accepted and rejected
steps). Reverse-mode derivatives move by about an ulp (XLA fuses the program
differently), and so do batched solves under ``jax.vmap`` (the predicate is batched; JAX
evaluates both branches and selects). There the last bits of a step's error estimate can
move a step, so batch results can change at the tolerance's level: 8 perturbed paper
balls, tol 1e-10, ``jax.vmap`` of ``rb.integrate``: 2.6e-9 from the unwrapped batch, one
member with one accepted step more; 9.5e-10 from the members' single solves (2.6e-9
before). They also run faster: B = 16, median of 100 calls, two runs each, 14.7-14.8 →
13.0-13.4 ms. ``docs/derivatives.md`` gives the benchmark runs.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax


def own_executor(field: Callable) -> Callable:
    """A vector field ``field(t, y) -> ẏ`` (``ẏ`` of ``y``'s shape and dtype) wrapped so
    that XLA:CPU runs it in its own sequential executor (see the module docstring). Same
    values and derivatives up to rounding (JAX differentiates through ``lax.cond``); a NaN
    ``t`` gives a NaN ``ẏ`` (and zero derivatives). When JAX's default backend is not the
    CPU, ``field`` itself is returned."""
    if jax.default_backend() != "cpu":
        return field

    def wrapped(t, y):
        return lax.cond(t == t, lambda: field(t, y), lambda: jnp.full_like(y, jnp.nan))

    return wrapped
