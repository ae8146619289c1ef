"""XLA's small-loop option: solve and derivative times against the loop-size threshold.

XLA:CPU compiles a ``while`` loop that accesses fewer than
``xla_cpu_small_while_loop_byte_threshold`` bytes per iteration (and holds no ``dot``,
custom call or scatter) into one kernel instead of running each operation as a separate
"thunk" (``rollball_jax._xla_flags``). This script times, for each threshold, in a fresh
process (XLA reads the option when its CPU backend starts):

* ``fwd15``  ``jax.jit`` of ``rb.integrate``, paper ball (3 masses, N = 15), [0, 20], tol 1e-10;
* ``fwd25``  the same for a ball with 8 masses on random tilted circles (N = 25);
* ``grad15`` / ``grad25``  ``jax.jit(jax.grad)`` of ``rb.final_gc``'s e1 component w.r.t. x(0),
  [0, 20] (discrete adjoint, reverse sweep);
* ``hvp``    a Hessian-vector product (``jax.jvp`` of ``jax.grad``), paper ball, [0, 3];

each as compile (first call) [s] and median steady call [ms]. ``1024`` is XLA's default.

Run: ``python benchmarks/bench_small_loops.py [--thresholds 1024,50000,200000,1000000]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

BODY = r"""
import statistics, time
import jax, jax.numpy as jnp, numpy as np
import rollball_jax as rb

v = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
rails = [rb.CircleRail.paper(r, vi) for r, vi in zip([0.95, 0.9, 0.85], v)]
ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], rails)
x0 = jnp.asarray(ball.initial_state(theta=[0.0, 2.0369, 0.7044]))
c = rb.PaperStep.ball(3)
rng = np.random.default_rng(1)
rails8 = [rb.CircleRail.paper(0.5 + 0.05 * i, [rng.uniform(0, 3), rng.uniform(0, 3), 1.0]) for i in range(8)]
ball8 = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0, 0, -0.05], 1.0, [0.3] * 8, rails8)
x8 = jnp.asarray(ball8.initial_state(theta=list(rng.uniform(0, 6, 8))))
c8 = rb.PaperStep.ball(8)
ts = jnp.array([0.0, 0.1, 0.2, 1, 2, 5, 10, 15, 20.0])
w = jnp.asarray(rng.standard_normal(15))
cases = {
    "fwd15": (jax.jit(lambda x: rb.integrate(ball, c, x, ts).ys), x0, 100),
    "fwd25": (jax.jit(lambda x: rb.integrate(ball8, c8, x, ts).ys), x8, 100),
    "grad15": (jax.jit(jax.grad(lambda x: rb.final_gc(ball, c, x, (0.0, 20.0))[0])), x0, 50),
    "grad25": (jax.jit(jax.grad(lambda x: rb.final_gc(ball8, c8, x, (0.0, 20.0))[0])), x8, 50),
    "hvp": (jax.jit(lambda x: jax.jvp(jax.grad(lambda z: rb.final_gc(ball, c, z, (0.0, 3.0))[0]), (x,), (w,))[1]), x0, 20),
}
out = []
for name, (f, x, n) in cases.items():
    t = time.perf_counter(); jax.block_until_ready(f(x)); first = time.perf_counter() - t
    s = []
    for _ in range(n):
        t = time.perf_counter(); jax.block_until_ready(f(x)); s.append(time.perf_counter() - t)
    out.append(f"{first:6.2f} {1e3 * statistics.median(s):8.3f}")
print(" | ".join(out))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thresholds", default="1024,50000,200000,1000000", help="byte thresholds (comma-separated)")
    args = ap.parse_args(argv)
    names = ["fwd15", "fwd25", "grad15", "grad25", "hvp"]
    print("threshold[B] | " + " | ".join(f"{n + ' s, ms':>15s}" for n in names))
    for thr in args.thresholds.split(","):
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ROLLBALL_JAX_XLA_DEFAULTS")}
        env["XLA_FLAGS"] = ("--xla_cpu_use_fusion_emitters=false "
                            f"--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold={int(thr)}")
        p = subprocess.run([sys.executable, "-c", BODY], env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise SystemExit(p.stderr[-3000:])
        print(f"{int(thr):12d} | " + p.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
