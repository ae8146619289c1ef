"""XLA options the package sets by default (before JAX creates its CPU backend).

``--xla_cpu_use_fusion_emitters=false``: XLA's newer CPU fusion emitters compile this
package's programs (Runge–Kutta loops around a vector field of a few hundred scalar
operations) markedly slower and run them no faster. Measured on 2 cores, jax/jaxlib
0.10.2, ``python benchmarks/bench_derivatives.py --repeats 5`` (paper ball, [0, 20], tol
1e-10), default vs this flag: reverse-gradient compile 4.98 → 3.54 s, forward-mode
Jacobian compile 3.70 → 2.52 s, forward-solve compile 1.20 → 0.90 s; steady times equal
within run-to-run noise (gradient 11.0 vs 10.1 ms, forward solve 1.51 vs 1.43 ms).
Results agree to rounding (reverse vs forward gradient 9.3e-16 vs 1.4e-15 relative).

``--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=200000`` (2026-12-04):
XLA:CPU runs each operation of a program as a separate "thunk" (tens of nanoseconds of
dispatch each), except that a ``while`` loop accessing fewer than this many bytes per
iteration, and holding no ``dot``, custom call or scatter, is compiled into one kernel
(XLA's ``SmallWhileLoopHoistingPass``; default threshold 1,024 bytes). A Runge–Kutta solve
of a small ODE is exactly such a loop, and its time was mostly that dispatch. With the
threshold at 200 kB (and the vector fields written without ``dot``:
:func:`rollball_jax.geometry.matvec`) the solves and the discrete adjoint's loops become
single kernels. Measured on 2 cores, ``python benchmarks/bench_small_loops.py`` (fresh
process per row; compile [s] / steady call [ms]; ``1024`` is XLA's default):

===========  ============  =============  ============  =============  =============
threshold    fwd15         fwd25          grad15        grad25         hvp
===========  ============  =============  ============  =============  =============
1024         1.09 / 1.171  0.95 / 0.784   2.24 / 5.434  2.26 / 10.257  5.86 / 3.662
50,000       1.09 / 0.235  1.03 / 0.245   2.31 / 1.749  2.24 / 8.405   5.74 / 2.820
**200,000**  1.08 / 0.214  0.96 / 0.239   2.75 / 1.607  2.97 / 1.998   7.70 / 1.181
1,000,000    1.19 / 0.237  1.03 / 0.253   2.75 / 1.620  2.78 / 1.834   10.72 / 1.026
===========  ============  =============  ============  =============  =============

(fwd: ``jit(rb.integrate)``, paper ball N = 15 and an 8-mass ball N = 25, [0, 20], tol
1e-10; grad: reverse-mode gradient of the final GC w.r.t. x(0) over [0, 20]; hvp: a
Hessian-vector product over [0, 3].) Larger thresholds put larger loops into one kernel,
and such a kernel compiles more slowly (LLVM optimises it as one function): the
Hessian-vector product compiles 1.8× longer at 1,000,000 than at XLA's default. 200,000
takes the first-order gains (50,000 misses the 8-mass gradient) at +23–31 % compile for
the gradient and the Hessian-vector product. Forward solves and the reverse gradient
through the discrete adjoint are bit-identical with and without the option (paper ball;
tested). Solves under ``jax.vmap`` are not: the kernel's rounding depends on the batch
size (9e-12 between 2 and 4 members a device). Mode ``adaptive`` of
:mod:`rollball_jax.batch` therefore solves the members one at a time on the CPU
(``lax.map``), which is also 5× faster than vmapping them (``docs/batch.md``). Only XLA's CPU compiler reads the key; other backends ignore it (XLA
passes to LLVM only the extra options whose names do not start with ``xla_``).

Larger models touch more bytes per iteration. A ball with 20 masses (N = 49) and a
12-knot spline control over [0, 10]: forward solve 3.14 → 0.48 ms, but reverse gradient
only 18.3 → 11.7 ms at 200,000 (the reverse sweep's chunk loops carry the chunk's stage
inputs, 16·13·49 numbers, and stay above it); 4.2 ms at 1,000,000 (compile 2.4 → 3.2 s).
For such models set the option yourself, e.g.
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1000000``
(an explicit setting wins). The same 3-mass ball with that spline control: forward
2.96 → 0.19 ms, gradient 11.8 → 1.17 ms.

The options are added to ``XLA_FLAGS`` at ``import rollball_jax`` only when

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
Jacobians run 8–28 % slower (``benchmarks/README.md``, ``bench_design.py``). Again on
2026-12-07 (``XLA_FLAGS=--xla_backend_optimization_level=0 python -m pytest -q``): 268 s
instead of 358 s, 7 failed, all on properties that hold at the default level only: results
bit-identical across two programs (four host devices against one, 1 ulp; dense saves
against step ends; a sweep's subprocess), a batch mode's accepted steps ±2 instead of ±1,
the shared mode's refinement status, and two bounds 1.15× and 1.4× over (Hessian-vector
product against differences, sweep under ``vmap``). The tests therefore run at the level
users run (a level-0 kernel also runs ~2× slower). The hessian of the paper ball's GC(5)
compiled in 2.3 s at level 0 against 4.9–6.1 s (levels 1, 2 and the default 5.2, 4.9, 5.2–6.1 s).

XLA reads ``XLA_FLAGS`` when JAX creates its backend (at the first computation): in a
process that computed with JAX before importing rollball_jax the option has no effect.
"""

from __future__ import annotations

import os

#: Bytes a ``while`` loop may access per iteration and still be compiled as one kernel
#: (XLA's default: 1,024; see the module docstring).
SMALL_LOOP_BYTES = 200_000
#: Options added to ``XLA_FLAGS`` (see the module docstring for the measurements).
DEFAULT_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false",
    # an explicit --xla_backend_extra_options (any key) wins over this one
    f"--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold={SMALL_LOOP_BYTES}",
)
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


def small_loops_threshold(environ=None) -> int:
    """The ``xla_cpu_small_while_loop_byte_threshold`` that ``XLA_FLAGS`` in ``environ``
    (default ``os.environ``) asks for: XLA's default, 1,024, when it names none (the
    package's option opted out, or replaced by the user's own ``--xla_backend_extra_options``).
    A process whose CPU backend started before ``import rollball_jax`` runs with the
    setting of that moment, which this cannot see."""
    env = os.environ if environ is None else environ
    threshold = 1024
    for flag in env.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_backend_extra_options="):
            for item in flag.split("=", 1)[1].split(","):
                key, _, value = item.partition("=")
                if key.strip() == "xla_cpu_small_while_loop_byte_threshold" and value.strip().isdigit():
                    threshold = int(value)
    return threshold


def group_loop_compiler_options() -> dict:
    """``compiler_options`` for ``jax.jit`` of the batch group loops: the fusion emitters on
    (faster runs of their wide programs, see the module docstring); empty for an untested
    jaxlib, whose XLA may not know the option."""
    version = _jaxlib_version()
    if version is None or not (TESTED_JAXLIB[0] <= version < TESTED_JAXLIB[1]):
        return {}
    return {"xla_cpu_use_fusion_emitters": True}
