"""--markdown: the tables of docs/results/README.md."""

from .results import (
    TXN_WORKLOADS, human, mean_mops, measured, ordered_workloads, prop, series_names,
    thread_counts, unique, with_series)
from .canvas import thread_word
from .figures import bucket_bits_of, busiest_workload, format_ns, pmeh_option


def ceiling_fraction_by_key(runs):
    """Mean ceiling fraction of the measured phase, by (series, threads,
    workload); absent where the file had no ceilings."""
    out = {}
    for r in runs:
        f = measured(r).get("ceiling_fraction")
        if f is not None:
            out.setdefault((r["series"], r["threads"], r["workload"]), []).append(f)
    return {k: sum(v) / len(v) for k, v in out.items()}


def markdown_tables(docs):
    """Throughput per workload and engine (Mops/s, and in brackets the share
    of the matching ceiling) for each thread count, the ceilings, and what
    durability each engine ran with."""
    runs = with_series([r for d in docs for r in d["runs"]])
    lines = []
    if runs:
        series = series_names(runs)
        mops = mean_mops(runs)
        fractions = ceiling_fraction_by_key(runs)
        for threads in thread_counts(runs):
            lines.append(f"{thread_word(threads)}, Mops/s (share of the ceiling):")
            lines.append("")
            lines.append("| workload | " + " | ".join(series) + " |")
            lines.append("|---|" + "---:|" * len(series))
            for w in ordered_workloads(runs):
                cells = []
                for name in series:
                    key = (name, threads, w)
                    if key not in mops:
                        cells.append("-")
                        continue
                    cell = f"{mops[key]:.2f}"
                    if key in fractions:
                        cell += f" ({100 * fractions[key]:.0f}%)"
                    cells.append(cell)
                lines.append(f"| {w} | " + " | ".join(cells) + " |")
            lines.append("")
        lines.append("Durability:")
        lines.append("")
        for name in series:
            text = next(r["durability"] for r in runs if r["series"] == name)
            lines.append(f"- {name}: {text}")
        lines.append("")
        lines.extend(transaction_lines(runs))
        lines.extend(op_p99_lines(runs))
        lines.extend(bucket_bits_lines(runs))
        lines.extend(movement_lines(runs))
        lines.extend(split_step_lines(runs))
        lines.extend(reopen_lines(runs))
    lines.extend(skipped_lines(docs))
    ceilings = [c for d in docs for c in d["ceilings"]]
    if ceilings:
        c0 = ceilings[0]
        lines.append(f"Ceilings ({c0['granularity']}, {c0['region_bytes'] >> 20} MiB region):")
        lines.append("")
        lines.append("| threads | dependent line reads/s | independent line reads/s | "
                     "persists/s | seq. read GB/s | seq. write GB/s |")
        lines.append("|---:|---:|---:|---:|---:|---:|")
        for c in ceilings:
            lines.append(f"| {c['threads']} | {human(c['dependent_reads_per_s'])} | "
                         f"{human(c['independent_reads_per_s'])} | "
                         f"{human(c['persists_per_s'])} | "
                         f"{c['seq_read_bytes_per_s'] / 1e9:.1f} | "
                         f"{c['seq_write_bytes_per_s'] / 1e9:.1f} |")
        lines.append("")
    return "\n".join(lines)


def transaction_lines(runs):
    """For the transactional workloads: Mops/s there counts transactions;
    and the attempts each series had aborted and retried."""
    txn_runs = [r for r in runs if r["workload"] in TXN_WORKLOADS
                and r["run"] is not None and r["run"].get("transactions")]
    if not txn_runs:
        return []
    lines = ["Transactions (txn: 3 reads + 1 update each; its Mops/s above are "
             "millions of transactions/s), attempts aborted and retried:", ""]
    for name in series_names(txn_runs):
        parts = [f"{thread_word(r['threads'])}: {r['run']['transactions']['aborts']}"
                 for r in txn_runs if r["series"] == name]
        lines.append(f"- {name}: " + ", ".join(parts))
    lines.append("")
    return lines


def op_p99_lines(runs):
    """p99 of inserts in the workload with the most inserts and of reads in
    the one with the most reads, per series and thread count (the figure
    op_latency_cdf.png); nothing unless some run phase has both kinds."""
    insert_w = busiest_workload(runs, "insert")
    read_w = busiest_workload(runs, "read")
    if insert_w is None or read_w is None or insert_w == read_w:
        return []
    lines = [f"p99 latency: insert in {insert_w}, search in {read_w}:", "",
             "| series | threads | insert p50 | insert p99 | search p50 | search p99 |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in series_names(runs):
        for t in thread_counts(runs):
            cells = []
            for workload, op in ((insert_w, "insert"), (read_w, "read")):
                lat = next((r["run"]["latency_ns"].get(op) for r in runs
                            if r["series"] == name and r["threads"] == t
                            and r["workload"] == workload and r["run"]), None)
                cells += [format_ns(lat["p50"]), format_ns(lat["p99"])] if lat else ["-", "-"]
            if cells != ["-"] * 4:
                lines.append(f"| {name} | {t} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def bucket_bits_lines(runs):
    """The bucket-bits sweep: insert (load) and search (100% read run)
    Mops/s per thread count, groups and heap bytes per key after the load,
    and the clean open time when measured."""
    sweep = [r for r in runs if bucket_bits_of(r) is not None]
    bits = sorted(set(bucket_bits_of(r) for r in sweep))
    if len(bits) < 2:
        return []
    threads = thread_counts(sweep)
    head = ["b"]
    for t in threads:
        head += [f"insert {t} thr", f"search {t} thr"]
    head += ["groups", "slots per key", "heap B/key", "clean open"]
    lines = ["nehash bucket-directory bits (Mops/s; groups, space and open "
             "time after the load):", "",
             "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    def cell(v, fmt):
        return "-" if v is None else format(v, fmt)

    for b in bits:
        mine = [r for r in sweep if bucket_bits_of(r) == b]
        row = [str(b)]
        for t in threads:
            at = [r for r in mine if r["threads"] == t]
            row.append(cell(mean([r["load"]["ops_per_s"] / 1e6 for r in at]), ".2f"))
            row.append(cell(mean([r["run"]["ops_per_s"] / 1e6 for r in at
                                  if r["run"] and r["run"]["mix"].get("read", 0) == 1]), ".2f"))
        first = mine[0]["load"]
        groups = prop(first, "nehash", "groups")
        items = first["ops"]
        row.append(cell(groups, "d"))
        row.append(cell(first["slots"] / items if first.get("slots") else None, ".1f"))
        row.append(cell(first.get("bytes_per_key"), ".0f"))
        opens = [r["reopen"]["clean"]["open_ns"] / 1e6 for r in mine if r.get("reopen")]
        row.append(f"{min(opens):.2f} ms" if opens else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def movement_lines(runs):
    """pmeh's and nehash's data movement in load phases: slots and bytes splits moved
    per inserted key against 1.44/k, splits, segments, load factor and heap
    bytes per key, per series and key count."""
    loads = [r for r in runs if r["engine"] in ("pmeh", "nehash") and r["workload"] == "load"
             and r["load"] is not None and prop(r["load"], r["engine"], "bytes_moved") is not None]
    if not loads:
        return []
    lines = ["Data movement of splits during the load (per inserted key; expected "
             "slots 1.44/k for pmeh, 0.72 for nehash's 2-split, pmeh design §12.4):", "",
             "| series | threads | keys | slots moved | expected | bytes moved | splits | "
             "segments | load factor | heap B/key |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(loads, key=lambda r: (r["series"], r["threads"], r["load"]["ops"])):
        p = r["load"]
        k = pmeh_option(r, "pmeh_split_bits")
        expected = f"{1.44 / k:.2f}" if k else ("0.72" if r["engine"] == "nehash" else "-")
        lf = p["load_factor"][-1][1] if p.get("load_factor") else None
        inserted = p["ops"] or 1
        moved = prop(p, r["engine"], "items_moved") / inserted
        moved_bytes = prop(p, r["engine"], "bytes_moved") / inserted
        lines.append(f"| {r['series']} | {r['threads']} | {human(p['ops'])} | "
                     f"{moved:.2f} | {expected} | "
                     f"{moved_bytes:.1f} | {prop(p, r['engine'], 'splits')} | "
                     f"{prop(p, r['engine'], 'segments') or '-'} | "
                     f"{'-' if lf is None else format(lf, '.2f')} | "
                     f"{'-' if p.get('bytes_per_key') is None else format(p['bytes_per_key'], '.0f')} |")
    lines.append("")
    return lines


def split_step_lines(runs):
    """Insert latency of the run phase per pmeh split step B."""
    steps = [r for r in runs if pmeh_option(r, "pmeh_split_step") is not None
             and r["run"] is not None and "insert" in r["run"]["latency_ns"]]
    if len(set(pmeh_option(r, "pmeh_split_step") for r in steps)) < 2:
        return []
    lines = ["pmeh insert latency by split step B (run phase):", "",
             "| B | threads | p50 | p99 | p99.9 | max |", "|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(steps, key=lambda r: (pmeh_option(r, "pmeh_split_step"), r["threads"])):
        lat = r["run"]["latency_ns"]["insert"]
        lines.append(f"| {pmeh_option(r, 'pmeh_split_step')} | {r['threads']} | "
                     f"{format_ns(lat['p50'])} | {format_ns(lat['p99'])} | "
                     f"{format_ns(lat['p999'])} | {format_ns(lat['max'])} |")
    lines.append("")
    return lines


def reopen_lines(runs):
    """Open time after a clean close and after a crash, per series and key
    count (the fastest of the runs measured), with groups and space."""
    reopened = [r for r in runs if r.get("reopen")
                and bucket_bits_of(r) in (None, 6) and "b=" not in r["series"]]
    if not reopened:
        return []
    lines = ["Open time (Stats::open_ns; the fastest of the runs of each size):", "",
             "| series | keys | groups | heap B/key | clean open | crash open | crash open per key |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    keyed = {}
    for r in reopened:
        keyed.setdefault((r["series"], r["reopen"]["clean"]["items"]), []).append(r["reopen"])
    for (name, items), opens in sorted(keyed.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        clean = min(o["clean"]["open_ns"] for o in opens) / 1e6
        crashes = [o["crash"]["open_ns"] for o in opens if o["crash"]]
        crash = f"{min(crashes) / 1e6:.2f} ms" if crashes else "-"
        per_key = f"{min(crashes) / items:.0f} ns" if crashes else "-"
        first = opens[0]["clean"]
        groups = str(prop(first, "nehash", "groups") or "-")
        if prop(first, "pmeh", "segments"):
            groups = f"{prop(first, 'pmeh', 'segments')} segments"
        lines.append(f"| {name} | {human(items)} | {groups} | {first['bytes_per_key']:.0f} | "
                     f"{clean:.2f} ms | {crash} | {per_key} |")
    lines.append("")
    return lines


def skipped_lines(docs):
    """The runs the files list as skipped, once per engine, workload and
    reason."""
    seen = unique((s["engine"], s["workload"], s["reason"])
                  for d in docs for s in d.get("skipped", []))
    if not seen:
        return []
    lines = ["Skipped:", ""]
    lines += [f"- {engine}, workload {workload}: {reason}"
              for engine, workload, reason in seen]
    lines.append("")
    return lines
