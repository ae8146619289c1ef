"""XLA options the package sets by default (before JAX creates its CPU backend).

``--xla_cpu_use_fusion_emitters=false``: XLA's newer CPU fusion emitters compile this
package's programs (Runge–Kutta loops around a vector field of a few hundred scalar
operations) markedly slower and run them no faster. Measured on 2 cores, jax/jaxlib
0.10.2, ``python benchmarks/bench_derivatives.py --repeats 5`` (paper ball, [0, 20], tol
1e-10), default vs this flag: reverse-gradient compile 4.98 → 3.54 s, forward-mode
Jacobian compile 3.70 → 2.52 s, forward-solve compile 1.20 → 0.90 s; steady times equal
within run-to-run noise (gradient 11.0 vs 10.1 ms, forward solve 1.51 vs 1.43 ms).
Results agree to rounding (reverse vs forward gradient 9.3e-16 vs 1.4e-15 relative).

The option is added to ``XLA_FLAGS`` at ``import rollball_jax`` only when

* the environment variable ``ROLLBALL_JAX_XLA_DEFAULTS`` is not ``0``,
* ``XLA_FLAGS`` does not already name the option (an explicit choice wins), and
* the installed jaxlib is in the tested range (an XLA that does not know an option in
  ``XLA_FLAGS`` aborts the process, so the option is never set for an untested jaxlib).

The batch group loops (``rollball_jax.batch`` strategies Lockstep/Shared/Fixed) are the
exception: their wide structure-of-arrays programs run faster with the fusion emitters, so
their compilation turns them back on (:func:`group_loop_compiler_options`). Measured,
``python benchmarks/bench_batch.py --sizes 4096 --modes lockstep`` (2 cores): emitters on
17,003 / 17,273 traj/s (compile 4.1 s), off 15,826 / 16,648 (3.2 s), on for the group loop
only 17,338 / 17,553 (4.0 s). Mode adaptive (``jax.vmap`` of diffrax) gains with them off:
2,102 / 2,129 → 2,576 / 2,568 traj/s, compile 2.7 → 2.0 s.

Not set, measured: LLVM's optimisation level (``--xla_backend_optimization_level``) changes
rounding, not only speed. With 0 the test suite ran in 460 s instead of 732 s (2 cores)
but 4 tests failed on last-bit differences (batch step counts, a sweep resumed in a
default-flag process no longer bit-identical, a derivative 2e-9 off); with 1 compiles are
~15 % shorter, a sweep still differs by 1 ulp from a default-flag process, and forward-mode
Jacobians run 8–28 % slower (``benchmarks/README.md``, ``bench_design.py``).

XLA reads ``XLA_FLAGS`` when JAX creates its backend (at the first computation): in a
process that computed with JAX before importing rollball_jax the option has no effect.
"""

from __future__ import annotations

import os

#: Options added to ``XLA_FLAGS`` (see the module docstring for the measurement).
DEFAULT_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)
#: jaxlib versions (inclusive lower, exclusive upper) whose XLA knows every option above.
TESTED_JAXLIB = ((0, 10, 2), (0, 11, 0))
#: Set to ``0`` to leave ``XLA_FLAGS`` untouched.
OPT_OUT_VARIABLE = "ROLLBALL_JAX_XLA_DEFAULTS"


def _jaxlib_version() -> tuple[int, ...] | None:
    try:
        from jaxlib import version as _v
    except ImportError:  # pragma: no cover - jaxlib is a dependency
        return None
    parts = []
    for piece in str(_v.__version__).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts)


def flags_to_add(environ=None, jaxlib_version=None) -> list[str]:
    """The default options that :func:`apply` would add to ``XLA_FLAGS`` in ``environ``
    (default ``os.environ``) for ``jaxlib_version`` (default: the installed one)."""
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_VARIABLE, "1").strip() == "0":
        return []
    version = _jaxlib_version() if jaxlib_version is None else tuple(jaxlib_version)
    if version is None or not (TESTED_JAXLIB[0] <= version < TESTED_JAXLIB[1]):
        return []
    present = env.get("XLA_FLAGS", "")
    return [f for f in DEFAULT_FLAGS if f.split("=")[0] not in present]


def apply() -> list[str]:
    """Add the default options to ``os.environ["XLA_FLAGS"]``; returns those added."""
    added = flags_to_add()
    if added:
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "").strip(), *added]).strip()
    return added


def group_loop_compiler_options() -> dict:
    """``compiler_options`` for ``jax.jit`` of the batch group loops: the fusion emitters on
    (faster runs of their wide programs, see the module docstring); empty for an untested
    jaxlib, whose XLA may not know the option."""
    version = _jaxlib_version()
    if version is None or not (TESTED_JAXLIB[0] <= version < TESTED_JAXLIB[1]):
        return {}
    return {"xla_cpu_use_fusion_emitters": True}
