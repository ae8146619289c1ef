"""Print the surviving mutants of a cosmic-ray session: file:line, operator, diff."""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
cols = [r[1] for r in c.execute("pragma table_info(work_results)")]
rows = c.execute("""select s.module_path, s.start_pos_row, s.operator_name, s.occurrence, r.diff, r.test_outcome
                    from mutation_specs s join work_results r on s.job_id = r.job_id
                    where r.test_outcome in ('SURVIVED') order by s.module_path, s.start_pos_row""").fetchall()
done = c.execute("select test_outcome, count(*) from work_results group by test_outcome").fetchall()
print(done)
for m, row, op, occ, diff, out in rows:
    lines = [l for l in (diff or "").splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    print(f"{m}:{row} {op.split('/')[-1]} :: " + " | ".join(l.strip() for l in lines))
