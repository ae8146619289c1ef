"""Does the structure-of-arrays interpreter earn its keep? (the batch design's decision benchmark, `docs/batch.md`)

The batch modes ``lockstep``/``shared``/``fixed`` evaluate the vector field of a group of
members with ``rollball_jax.batch._soa.SoAVectorField``: the member's jaxpr re-executed
with every scalar replaced by a vector over the group, sin/cos replaced by the
vectorisable polynomial ``sincos``. The alternative is ``jax.vmap`` of the member's vector
field, with or without the same sin/cos substitution. This script runs the *same* group
Runge–Kutta loop (``simulate_batch(strategy=Lockstep(...))``) with each of the three right-hand
sides, on bench_batch.py's problem (perturbed paper ball, u of (7.11), t ∈ [0, 20], tol
1e-8, Dopri8, B = 4096 by default), side by side in one run, and prints the throughput,
the first-call time and the largest difference from the interpreter's result.

Right-hand sides (``--fields``):

* ``soa``           the interpreter (what the package uses);
* ``vmap``          ``jax.vmap(model.vector_field)`` over the group (XLA's sin/cos);
* ``vmap_sincos``   the same with the member's jaxpr evaluated with sin/cos → ``sincos``
                    (``rollball_jax.batch._group_field.GroupVectorField``: every other
                    primitive is bound unchanged).

Run:  python benchmarks/bench_soa_decision.py [--size 4096] [--host-devices N]
The last line is ``soa_over_best_vmap: X`` (throughput ratio; the interpreter stays only
if X ≥ 1.5).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_batch import TOL, T0, T1, TS, _HOST_DEVICES, problem  # noqa: E402  (sets XLA_FLAGS first)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from rollball_jax import batch as bt  # noqa: E402
from rollball_jax.batch import _driver, _soa  # noqa: E402
from rollball_jax.batch._group_field import GroupVectorField  # noqa: E402


class _PlainVmap(GroupVectorField):
    """jax.vmap of the member's field with XLA's sin/cos, whatever fast_trig says."""

    def __init__(self, *args, **kwargs):
        kwargs["fast_trig"] = False
        super().__init__(*args, **kwargs)


FIELDS = {"soa": _soa.SoAVectorField, "vmap": _PlainVmap, "vmap_sincos": GroupVectorField}


def run(field: str, B: int, group: int, repeats: int = 3):
    _driver.SoAVectorField = FIELDS[field]
    _driver._soa_fn.cache_clear()
    models, control, x0s, _ = problem(B)
    kw = dict(ts=TS, control_axis=None, strategy=bt.Lockstep(group_size=group), rtol=TOL, atol=TOL)
    t = time.perf_counter()
    res = bt.simulate_batch(models, control, x0s, (T0, T1), **kw)
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        res = bt.simulate_batch(models, control, x0s, (T0, T1), **kw)
        times.append(time.perf_counter() - t)
    return res, min(times), first


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--group-size", type=int, default=256)
    ap.add_argument("--fields", default="soa,vmap,vmap_sincos")
    ap.add_argument("--host-devices", type=int, default=_HOST_DEVICES, help="XLA host devices (set before JAX starts)")
    args = ap.parse_args(argv)
    fields = args.fields.split(",")
    print(f"lockstep, B = {args.size}, group {args.group_size}, tol {TOL:g}, devices {jax.device_count()}")
    print(f"{'right-hand side':<14} {'traj/s':>9} {'first call [s]':>15} {'steps (mean)':>13} {'max |Δx| vs soa':>16}")
    print("(first call: compilation, and for the first field of the run the self-check against vmap)")
    results = {f: run(f, args.size, args.group_size) for f in fields}
    ref = results.get("soa", results[fields[0]])[0]
    for f, (res, best, first) in results.items():
        diff = float(np.nanmax(np.abs(np.asarray(res.ys) - np.asarray(ref.ys))))
        print(f"{f:<14} {args.size / best:9.0f} {first:15.1f} {float(np.mean(res.num_accepted_steps)):13.1f} {diff:16.2e}")
    if "soa" in results and len(results) > 1:
        best_vmap = min(results[f][1] for f in results if f != "soa")
        print(f"soa_over_best_vmap: {best_vmap / results['soa'][1]:.2f}")


if __name__ == "__main__":
    main()
