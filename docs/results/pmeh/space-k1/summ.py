import csv, glob, sys, statistics, re, collections
d = sys.argv[1]
rows = collections.defaultdict(list)
for f in sorted(glob.glob(d + '/*.csv')):
    m = re.search(r'/(\w+)-(?:(\d+)-)?([AB])-(\d+)\.csv$', f)
    kind, n, v, r = m.groups()
    for row in csv.DictReader(open(f)):
        key = (kind, n or '', row['workload'], v)
        rows[key].append(row)
def med(xs): return statistics.median(xs)
keys = sorted(set((k[0], k[1], k[2]) for k in rows))
print('| shape | records | workload | A Mops/s | B Mops/s | B/A | A p99.9 us | B p99.9 us | A B/key (lf) | B B/key (lf) | A deleg. | B deleg. | runs |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
for kind, n, w in keys:
    a = rows.get((kind, n, w, 'A'), []); b = rows.get((kind, n, w, 'B'), [])
    if not a or not b: continue
    def ops(rs):
        col = 'load_ops_per_s' if w == 'load' else 'run_ops_per_s'
        return med([float(x[col]) / 1e6 for x in rs])
    def p(rs): return med([float(x['p999_ns']) / 1e3 for x in rs])
    def bk(rs): return med([float(x['bytes_per_key'] or 0) for x in rs])
    def lf(rs): return med([float(x['load_factor_after'] or 0) for x in rs])
    def dl(rs): return med([float(x['delegated_ops'] or 0) for x in rs])
    print(f"| {kind} | {n} | {w} | {ops(a):.3f} | {ops(b):.3f} | {ops(b)/ops(a):.2f} | {p(a):.0f} | {p(b):.0f} | {bk(a):.0f} ({lf(a):.2f}) | {bk(b):.0f} ({lf(b):.2f}) | {dl(a):.0f} | {dl(b):.0f} | {len(a)}+{len(b)} |")
