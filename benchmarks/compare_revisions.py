"""Benchmark: batch throughput of this checkout against an earlier revision, in one process.

``bench_batch.py`` run twice, once per revision, cannot tell a 5 % regression from a
busy moment: on a shared 2-core machine its B = 4096 figure moves by 30 % within minutes.
This script loads both versions of the package into one process (the earlier one from
``git archive <rev>``, imported under another name: the package uses relative imports
only) and alternates their calls (A B, B A, A B, ...), so both see the same machine
phases. Problem: ``bench_batch.py``'s (the perturbed paper ball of Putkaradze & Rogers,
section 7, t ∈ [0, 20], 21 save times, tol 1e-8, Dopri8, group size 256, all local devices).

Printed: each version's best and median throughput [trajectories/s], the paired ratio
(median over rounds of t_rev / t_head: > 1 means this checkout is faster), the two
versions' mean step counts and their largest difference in the saved states. Revisions
from before the strategy objects (``mode="lockstep"``) and after them both work.

Run:  python benchmarks/compare_revisions.py --rev 919e5ed [--mode lockstep] [--size 4096]
          [--rounds 30] [--host-devices N]
The last line is ``throughput_ratio_vs_<rev>_<mode>_B<size>: X`` (paired median).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's package, then bench_batch's problem and host-device flags
sys.path.insert(1, str(ROOT / "benchmarks"))
import bench_batch  # noqa: E402  (sets XLA_FLAGS from --host-devices before JAX starts)


def load_revision(rev: str, workdir: Path):
    """Import the package as it was at ``rev`` (module name ``rollball_jax_<rev>``)."""
    name = "rollball_jax_" + "".join(c if c.isalnum() else "_" for c in rev)
    archive = workdir / "rev.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "rollball_jax"], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    (workdir / "rollball_jax").rename(workdir / name)
    sys.path.insert(0, str(workdir))
    return importlib.import_module(name)


def solver(rb, mode, B, group_size):
    """A no-argument function that runs one batch solve with package ``rb``."""
    bt = importlib.import_module(rb.__name__ + ".batch")
    model, control, x0s, _ = bench_batch.problem(B, pkg=rb)
    kw = dict(ts=bench_batch.TS, control_axis=None, rtol=bench_batch.TOL, atol=bench_batch.TOL)
    options = {} if mode == "adaptive" else {"group_size": group_size}
    if hasattr(bt, "strategy_from_name"):
        kw["strategy"] = bt.strategy_from_name(mode, **options)
    else:
        kw.update(mode=mode, **options)
    return lambda: bt.simulate_batch(model, control, x0s, (bench_batch.T0, bench_batch.T1), **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", required=True, help="the earlier git revision (commit, tag, branch)")
    ap.add_argument("--mode", default="lockstep", help="batch strategy by name")
    ap.add_argument("--size", type=int, default=4096, help="batch size B")
    ap.add_argument("--group-size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=30, help="timed calls per version, alternated")
    ap.add_argument("--host-devices", type=int, default=bench_batch._HOST_DEVICES, help="XLA host devices (CPU; default: cores)")
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    head = bench_batch.rb

    with tempfile.TemporaryDirectory() as tmp:
        old = load_revision(args.rev, Path(tmp))
        runs = {"head": solver(head, args.mode, args.size, args.group_size),
                args.rev: solver(old, args.mode, args.size, args.group_size)}
        first = {k: f() for k, f in runs.items()}  # compile both
        times = {k: [] for k in runs}
        order = list(runs)
        for i in range(args.rounds):
            for k in order if i % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t)

    print(f"jax {jax.__version__}, {len(jax.devices())} device(s) {jax.devices()[0].platform}; mode {args.mode}, "
          f"B = {args.size}, group size {args.group_size}, {args.rounds} alternated rounds")
    for k, res in first.items():
        ts = np.array(times[k])
        print(f"{k:>12}: best {args.size / ts.min():8.0f}  median {args.size / np.median(ts):8.0f} traj/s  "
              f"mean steps {float(np.mean(np.asarray(res.num_steps))):.3f}")
    diff = float(np.max(np.abs(np.asarray(first["head"].ys) - np.asarray(first[args.rev].ys))))
    print(f"max |ys_head - ys_{args.rev}| = {diff:.2e}")
    ratio = float(np.median(np.array(times[args.rev]) / np.array(times["head"])))
    best = float(min(times[args.rev]) / min(times["head"]))
    print(f"head / {args.rev} throughput: paired median {ratio:.3f}, best-of {best:.3f}")
    print(f"throughput_ratio_vs_{args.rev}_{args.mode}_B{args.size}: {ratio:.3f}")


if __name__ == "__main__":
    main()
