"""Benchmark: batched solves of the perturbed paper ball (rollball_jax.batch, every mode).

The paper's ball (Putkaradze & Rogers, section 7) with random rail radii in [0.8, 0.95] and random
initial rail angles θ_i(0) in [0, 2π), u(t) of (7.11), t ∈ [0, 20], 21 save times,
rtol = atol = 1e-8, Dopri8 (all methods). Printed, in one run, for B = 1, 16, 256, 4096
and 16384:

* ``batch <mode>``   ``rollball_jax.batch.simulate_batch`` on all local devices, for each
                     strategy: ``adaptive`` (vmap of diffrax, the default; equals single
                     solves), ``lockstep`` (structure-of-arrays, per-member steps),
                     ``shared`` (one step per group of 256), ``fixed`` (dt from the pilot);
* ``loop jit``       a Python loop over the compiled single solve ``jax.jit(rb.integrate)``;
* ``loop scipy``     a loop of ``scipy.integrate.solve_ivp(method="DOP853")`` with the
                     independent NumPy right-hand side of ``bench_paper_examples.py``,
                     restarted at the kinks of u(t) (the accuracy class of our jump times).

Loops are timed on a subsample and extrapolated (marked ``*``). Columns: throughput
[trajectories/s], first-call overhead (compilation), mean and max solver steps per
member, their ratio (the lockstep efficiency a vmapped solve would have), useful GFLOP/s
(650 flops per right-hand side × 13 evaluations per Dopri8 step × the members' own step
counts / time), peak memory per trajectory (growth of the peak RSS during the timed
calls / B), and the max error over 16 members and all save times against (a) a tight
reference (adaptive, tol 1e-12) and (b) the default adaptive batch at the same tolerance.

CPU: JAX gives one XLA device per process; the script asks for one host device per core
(``--host-devices``, default ``os.cpu_count()``) by setting ``XLA_FLAGS`` before JAX starts.
On a GPU the same code runs unchanged (``--host-devices 1``).

Run:  python benchmarks/bench_batch.py [--sizes 1,16,256,4096,16384]
          [--modes adaptive,lockstep,shared,fixed] [--group-size 256] [--host-devices N]
The last line is ``throughput_traj_per_s_B4096: X``: the fastest of our batch modes at
B = 4096 (named on the line before).
"""

from __future__ import annotations

import argparse
import os
import sys


def _early_flags(argv):
    """Set XLA_FLAGS for host devices before JAX initialises (needs only argv)."""
    n = os.cpu_count() or 1
    for i, a in enumerate(argv):
        if a == "--host-devices" and i + 1 < len(argv):
            n = int(argv[i + 1])
        elif a.startswith("--host-devices="):
            n = int(a.split("=", 1)[1])
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if n > 1:
        flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    return n


_HOST_DEVICES = _early_flags(sys.argv[1:])

import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rollball_jax as rb  # noqa: E402
from bench_paper_examples import KINKS, BallRHS  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402
from rollball_jax import batch as bt  # noqa: E402

TOL = 1e-8
T0, T1 = 0.0, 20.0
TS = np.linspace(T0, T1, 21)
RADII_RANGE = (0.8, 0.95)
V = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
X0 = np.array([0.0, 2.0369, 0.7044, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
FLOPS_PER_RHS = 650
EVALS_PER_STEP = 13  # Dopri8: 14 stages, first same as last
N_ERR = 16


def paper_ball(pkg=rb):
    """The paper's ball (section 7), built with the package ``pkg`` (default: this checkout's)."""
    rails = [pkg.CircleRail.paper(r, v) for r, v in zip([0.95, 0.9, 0.85], V)]
    return pkg.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], rails)


def problem(B, seed=0, pkg=rb):
    """B perturbed paper balls (batched model), shared control, initial states (B, 15), rail radii;
    built with the package ``pkg`` (``compare_revisions.py`` passes an earlier revision's)."""
    # separate streams: member i is the same design for every B
    radii = np.random.default_rng([seed, 0]).uniform(*RADII_RANGE, (B, 3))
    theta = np.random.default_rng([seed, 1]).uniform(0.0, 2.0 * np.pi, (B, 3))
    base = paper_ball(pkg)
    batched = jax.tree.map(lambda a: jnp.broadcast_to(a, (B,) + jnp.shape(a)) if eqx.is_array(a) else a, base)
    batched = eqx.tree_at(lambda m: m.rails.groups[0].radius, batched, jnp.asarray(radii))
    x0s = np.tile(X0, (B, 1))
    x0s[:, :3] = theta
    return batched, pkg.PaperStep.ball(3), x0s, radii


def _rss_now_and_reset():
    """Current RSS [bytes]; resets the peak (VmHWM) on Linux."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_rss():
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def run_batch(mode, B, group_size, dt=None, repeats=3, budget=3.0):
    models, control, x0s, _ = problem(B)
    options = {} if mode == "adaptive" else {"group_size": group_size}
    if mode == "fixed":
        options["dt"] = dt
    kw = dict(ts=TS, control_axis=None, strategy=bt.strategy_from_name(mode, **options), rtol=TOL, atol=TOL)
    t = time.perf_counter()
    res = bt.simulate_batch(models, control, x0s, (T0, T1), **kw)
    first = time.perf_counter() - t
    if mode == "fixed":
        kw["strategy"] = bt.Fixed(dt=res.dt, group_size=group_size)
    before = _rss_now_and_reset()  # after compilation: the memory of a solve
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        res = bt.simulate_batch(models, control, x0s, (T0, T1), **kw)
        times.append(time.perf_counter() - t)
        if sum(times) > budget:
            break
    peak = _peak_rss()
    best = min(times)
    mem = (peak - before) / B if (peak is not None and before is not None) else float("nan")
    return dict(res=res, time=best, compile=max(first - best, 0.0), mem=mem)


def loop_jit(B, n_sample):
    models, control, x0s, _ = problem(B)
    f = jax.jit(lambda m, x: rb.integrate(m, control, x, TS, rtol=TOL, atol=TOL).ys[0])
    m0 = bt.member(models, 0)
    t = time.perf_counter()
    jax.block_until_ready(f(m0, x0s[0]))
    first = time.perf_counter() - t
    k = min(B, n_sample)
    members = [bt.member(models, i) for i in range(k)]
    t = time.perf_counter()
    for i in range(k):
        jax.block_until_ready(f(members[i], x0s[i]))
    per = (time.perf_counter() - t) / k
    return dict(time=per * B, compile=max(first - per, 0.0), extrapolated=k < B, per=per)


def scipy_solve(rhs, x0):
    """DOP853 restarted at the kinks t = 0.1, 0.2 (as our jump times); states at TS."""
    edges = [T0, *KINKS, T1]
    y, out = np.asarray(x0, float), {}
    for a, b in zip(edges[:-1], edges[1:]):
        te = sorted({float(t) for t in TS if a <= t <= b} | {b})
        sol = solve_ivp(rhs, (a, b), y, method="DOP853", t_eval=te, rtol=TOL, atol=TOL)
        assert sol.success, sol.message
        out.update({float(t): v for t, v in zip(sol.t, sol.y.T)})
        y = sol.y[:, -1]
    return np.array([out[float(t)] for t in TS])


def loop_scipy(B, n_sample):
    _, _, x0s, radii = problem(B)
    k = min(B, n_sample)
    t = time.perf_counter()
    for i in range(k):
        rhs = BallRHS(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], radii[i], V)
        scipy_solve(rhs, x0s[i])
    per = (time.perf_counter() - t) / k
    return dict(time=per * B, extrapolated=k < B, per=per)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,16,256,4096,16384", help="batch sizes (comma-separated)")
    ap.add_argument("--modes", default="adaptive,lockstep,shared,fixed", help="batch strategies to time")
    ap.add_argument("--group-size", type=int, default=256, help="members per group (lockstep/shared/fixed)")
    ap.add_argument("--host-devices", type=int, default=_HOST_DEVICES, help="XLA host devices (CPU; default: cores)")
    ap.add_argument("--loop-sample", type=int, default=32, help="members timed in the jit loop (then extrapolated)")
    ap.add_argument("--scipy-sample", type=int, default=4, help="members timed with SciPy (then extrapolated)")
    ap.add_argument("--max-b-adaptive", type=int, default=16384, help="largest B for mode adaptive (slow)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]

    import diffrax
    import scipy

    print(f"python {platform.python_version()}  jax {jax.__version__} ({jax.default_backend()}, "
          f"{len(jax.devices())} devices: {jax.devices()[0].device_kind})  diffrax {diffrax.__version__}  "
          f"equinox {eqx.__version__}  numpy {np.__version__}  scipy {scipy.__version__}")
    print(f"cpu: {_cpu_model()}  os.cpu_count() = {os.cpu_count()}  XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print(f"problem: paper ball, rail radii U{RADII_RANGE}, θ(0) U[0, 2π), t in [{T0:g}, {T1:g}], {TS.size} save "
          f"times, rtol = atol = {TOL:g}, Dopri8; group size {args.group_size}")

    rows = []
    firsts = {}
    fixed_dt = None
    if "fixed" in modes:  # one step for all sizes: pilot on 256 members
        pm, pc, px, _ = problem(256)
        fixed_dt = bt.simulate_batch(pm, pc, px, (T0, T1), ts=TS, control_axis=None, rtol=TOL, atol=TOL,
                                     strategy=bt.Fixed(group_size=args.group_size, refine=False)).dt
        print(f"mode fixed: dt = {fixed_dt:.6g} chosen by the pilot on 256 members (embedded estimate <= 1)")
    for mode in modes:
        for B in sizes:
            if mode == "adaptive" and B > args.max_b_adaptive:
                continue
            try:
                r = run_batch(mode, B, args.group_size, dt=fixed_dt, repeats=3 if B <= 4096 else 1)
            except (MemoryError, RuntimeError) as e:  # XLA out of memory
                rows.append(dict(method=f"batch {mode}", B=B, note=f"failed: {type(e).__name__}"))
                continue
            res = r["res"]
            steps = res.num_steps.astype(float)
            useful = float(np.sum(steps)) * EVALS_PER_STEP * FLOPS_PER_RHS
            if B >= N_ERR:
                firsts[(mode, B)] = res.ys[:N_ERR]
            note = f"dt={res.dt:.4g}" if mode == "fixed" else ""
            if not np.all(res.ok):
                note += f" {int(np.sum(~res.ok))} failed"
            if np.any(res.refined):
                note += f" {int(np.sum(res.refined))} refined"
            rows.append(dict(method=f"batch {mode}", B=B, tps=B / r["time"], compile=r["compile"],
                             steps=(steps.mean(), steps.max()), eff=res.lockstep_efficiency,
                             gflops=useful / r["time"] / 1e9, mem=r["mem"], err=(None, None), note=note.strip()))
            print(_fmt(rows[-1]), flush=True)

    # Error columns: the first 16 members against a tight reference and the default mode.
    models, control, x0s, _ = problem(N_ERR)
    tight = bt.simulate_batch(models, control, x0s, (T0, T1), ts=TS, control_axis=None, rtol=1e-12, atol=1e-12, max_steps=200_000)
    default = bt.simulate_batch(models, control, x0s, (T0, T1), ts=TS, control_axis=None, rtol=TOL, atol=TOL)
    for row in rows:
        ys = firsts.get((row["method"].split()[-1], row["B"]))
        if ys is not None:
            row["err"] = (float(np.max(np.abs(ys - tight.ys))), float(np.max(np.abs(ys - default.ys))))
    sc = scipy_solve(BallRHS(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], problem(1)[3][0], V), x0s[0])
    scipy_err = (float(np.max(np.abs(sc - tight.ys[0]))), float(np.max(np.abs(sc - default.ys[0]))))

    for B in sizes:
        r = loop_jit(B, args.loop_sample)
        rows.append(dict(method="loop jit(integrate)", B=B, tps=B / r["time"], compile=r["compile"],
                         note=f"{r['per'] * 1e3:.1f} ms/traj" + (" *extrapolated" if r["extrapolated"] else "")))
        print(_fmt(rows[-1]), flush=True)
    for B in sizes:
        r = loop_scipy(B, args.scipy_sample)
        rows.append(dict(method="loop scipy DOP853 numpy", B=B, tps=B / r["time"], err=scipy_err,
                         note=f"{r['per'] * 1e3:.0f} ms/traj" + (" *extrapolated" if r["extrapolated"] else "")))
        print(_fmt(rows[-1]), flush=True)

    print()
    print(_header())
    for row in rows:
        print(_fmt(row))
    best = max((r for r in rows if r["method"].startswith("batch") and r.get("B") == 4096 and "tps" in r),
               key=lambda r: r["tps"], default=None)
    if best is None:
        print("best at B=4096: none measured (4096 is not in --sizes)")
        print("throughput_traj_per_s_B4096: nan")
        return
    print(f"best at B=4096: {best['method']} ({best['tps']:.0f} traj/s, {best['gflops']:.1f} GFLOP/s useful)")
    print(f"throughput_traj_per_s_B4096: {best['tps']:.0f}")


def _header():
    h = (f"{'method':<24} {'B':>6} {'traj/s':>9} {'compile[s]':>10} {'steps mean/max':>15} {'mean/max':>8} "
         f"{'GFLOP/s':>8} {'mem/traj':>9} {'err vs 1e-12':>12} {'vs adaptive':>11}  note")
    return h + "\n" + "-" * (len(h) + 10)


def _fmt(r):
    def f(v, spec, width):
        return f"{v:{width}{spec}}" if v is not None and not (isinstance(v, float) and np.isnan(v)) else f"{'-':>{width}}"

    steps = r.get("steps")
    st = f"{steps[0]:7.1f}/{steps[1]:<7.0f}" if steps else f"{'-':>15}"
    mem = r.get("mem")
    mem_s = f"{mem / 1024:7.1f}KB" if mem is not None and np.isfinite(mem) else f"{'-':>9}"
    err = r.get("err", (None, None))
    return (f"{r['method']:<24} {r['B']:>6} {f(r.get('tps'), '.0f', 9)} {f(r.get('compile'), '.2f', 10)} {st:>15} "
            f"{f(r.get('eff'), '.2f', 8)} {f(r.get('gflops'), '.2f', 8)} {mem_s:>9} {f(err[0], '.1e', 12)} "
            f"{f(err[1], '.1e', 11)}  {r.get('note', '')}")


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


if __name__ == "__main__":
    main()
