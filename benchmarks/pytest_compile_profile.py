"""pytest plugin: where the test suite's time goes (XLA compilation, tracing, lowering).

Listens to JAX's duration events (``jax.monitoring``) and writes, per worker process,
the seconds of ``backend_compile_duration`` (XLA compilation), ``jaxpr_trace_duration``
(tracing) and ``jaxpr_to_mlir_module_duration`` (lowering) of every test, then prints a
summary from the controller (totals, the 15 files and 20 tests with most compilation).

Run from the repository root::

    PYTHONPATH=benchmarks python -m pytest -p pytest_compile_profile --run-slow

(``--run-slow``: every test; without it the default tier only, ``tests/conftest.py``.)
Measured 2026-12-04 (2 cores, 2 workers, 447 tests): 579 s compiling, 150 s tracing,
83 s lowering, of ~880 s of the workers' test time. 2026-12-05 (slower machine, 1,066 s
of CPU): 636 s compiling in 3,090 XLA compilations, of which the 210 over 1 s took 482 s
and the 2,662 under 0.1 s 52 s (the summary's line "XLA compilations by duration").

The summary ends with the functions whose XLA compilations took at least 0.3 s (set
``ROLLBALL_JAX_COMPILE_PROFILE_LONG`` for another threshold), by total: how often each was
compiled and in which tests, i.e. where one compiled program could serve several tests.
Measured 2026-12-07 (462 tests, 405 s): 489 s compiling in 3,138 compilations; the
package's ``jit(flat)`` (``rb.simulate``, the Jacobians) 72 times (67 s) for as many model,
control and save-grid structures, the tests' own jitted lambdas 71 times (97 s).
2026-12-07, evening (488 tests): no program is compiled twice in a worker (identical HLO
compiled again: 6 s and 1 s in the two workers), so only fewer or smaller programs shorten
the suite, not a compilation cache.

Comparing two variants of the suite (an option, a rewritten test): run them at the same
time, one per core, then with the cores swapped, e.g.::

    taskset -c 0 python -m pytest -q -n 0 tests/test_design.py &   # variant A
    taskset -c 1 python -m pytest -q -n 0 tests/test_design.py     # variant B

Whole-suite runs one after the other drift with the machine's speed: on 2026-12-07 an LLVM
option (``-enable-gvn-memdep=false``) looked like 424–437 s → 375–379 s in consecutive
runs, and the paired runs showed 2–4 % (test_design.py 127/114 s against 130/119 s).
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from pathlib import Path

import jax

_EVENTS = ("backend_compile_duration", "jaxpr_trace_duration", "jaxpr_to_mlir_module_duration")
_current = ["<outside tests>"]
_seconds: dict = collections.defaultdict(collections.Counter)
#: (test, compiled function's name, seconds) of every XLA compilation of at least this long
_LONG = float(os.environ.get("ROLLBALL_JAX_COMPILE_PROFILE_LONG", "0.3"))
_long: list = []


# XLA compilations by duration: (upper bound [s], label); counts and seconds per bin.
_BINS = ((0.01, "<10 ms"), (0.1, "10-100 ms"), (1.0, "0.1-1 s"), (float("inf"), ">1 s"))


def _on_event(name, duration, **kwargs):
    short = name.rsplit("/", 1)[-1]
    if short in _EVENTS:
        _seconds[_current[0]][short] += duration
        if short == _EVENTS[0]:
            label = next(lab for bound, lab in _BINS if duration < bound)
            _seconds[_current[0]]["n " + label] += 1
            _seconds[_current[0]]["s " + label] += duration
            if duration >= _LONG:
                _long.append((_current[0], str(kwargs.get("fun_name")), duration))


jax.monitoring.register_event_duration_secs_listener(_on_event)


_DIR_VARIABLE = "ROLLBALL_JAX_COMPILE_PROFILE_DIR"


def pytest_configure(config):
    # the controller picks the directory; xdist's workers, started later, inherit it
    if not hasattr(config, "workerinput") and _DIR_VARIABLE not in os.environ:
        os.environ[_DIR_VARIABLE] = tempfile.mkdtemp(prefix="rollball_jax_compile_profile_")


def _directory() -> Path:
    return Path(os.environ[_DIR_VARIABLE])


def pytest_runtest_setup(item):
    _current[0] = item.nodeid


def pytest_sessionfinish(session):
    d = _directory()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (d / f"{worker}.json").write_text(json.dumps({k: dict(v) for k, v in _seconds.items()}))
    (d / f"{worker}.long").write_text(json.dumps(_long))


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput"):
        return
    per_test: dict = {}
    for f in sorted(_directory().glob("*.json")):
        per_test.update(json.loads(f.read_text()))
    totals = collections.Counter()
    per_file = collections.Counter()
    for test, ev in per_test.items():
        totals.update(ev)
        per_file[test.split("::")[0]] += ev.get(_EVENTS[0], 0.0)
    w = terminalreporter.write_line
    w("compile profile: " + ", ".join(f"{k} {totals[k]:.0f} s" for k in _EVENTS))
    w("XLA compilations by duration: " + ", ".join(
        f"{lab}: {totals['n ' + lab]:.0f} ({totals['s ' + lab]:.0f} s)" for _, lab in _BINS))
    w("compilation by file [s]:")
    for name, s in per_file.most_common(15):
        w(f"  {s:7.1f}  {name}")
    w("compilation by test [s] (trace, lowering):")
    ranked = sorted(per_test.items(), key=lambda kv: -kv[1].get(_EVENTS[0], 0.0))[:20]
    for test, ev in ranked:
        w(f"  {ev.get(_EVENTS[0], 0):6.1f} ({ev.get(_EVENTS[1], 0):4.1f}, {ev.get(_EVENTS[2], 0):4.1f})  {test}")
    # the same function compiled again and again (other shapes, constants or static arguments)
    by_name: dict = collections.defaultdict(list)
    for f in sorted(_directory().glob("*.long")):
        for test, name, sec in json.loads(f.read_text()):
            by_name[name].append((sec, test))
    w(f"functions compiled for >= {_LONG} s, by total (count, seconds, tests):")
    for name, hits in sorted(by_name.items(), key=lambda kv: -sum(h[0] for h in kv[1]))[:25]:
        tests = sorted({t.split("::")[-1][:40] for _, t in hits})
        w(f"  {len(hits):4d} {sum(h[0] for h in hits):7.1f}  {name[:60]}  [{'; '.join(tests[:4])}{' ...' if len(tests) > 4 else ''}]")
