"""Keep only the mutants inside the named functions of a cosmic-ray session (the others
are marked SKIPPED, as cosmic-ray's own filters do).

    python mutation/restrict.py SESSION.sqlite MODULE.py:func1,func2,L1-L2 [MODULE2.py:...]

A function name matches every ``def`` of that name in the module, nested ones included,
and mutants anywhere inside it; ``L1-L2`` keeps the lines L1 to L2 (inclusive).
"""
import ast
import sqlite3
import sys


def spans(path, names):
    tree = ast.parse(open(path).read())
    ranges = [tuple(int(v) for v in n.split("-")) for n in names if n[:1].isdigit()]
    return ranges + [(n.lineno, n.end_lineno) for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names]


def main(db, *specs):
    keep = {}
    for spec in specs:
        path, names = spec.split(":")
        keep[path] = spans(path, set(names.split(",")))
    c = sqlite3.connect(db)
    rows = c.execute("""select w.job_id, s.module_path, s.start_pos_row from work_items w
                        join mutation_specs s on s.job_id = w.job_id
                        where w.job_id not in (select job_id from work_results)""").fetchall()
    skipped = 0
    for job, path, row in rows:
        inside = any(a <= row <= b for a, b in keep.get(path, []))
        if not inside:
            c.execute("insert into work_results (job_id, worker_outcome, output, test_outcome, diff) "
                      "values (?, 'SKIPPED', 'outside the restricted functions', NULL, NULL)", (job,))
            skipped += 1
    c.commit()
    print(f"{len(rows) - skipped} mutants kept, {skipped} skipped")


if __name__ == "__main__":
    main(*sys.argv[1:])
