"""--markdown: the tables of docs/results/README.md."""

from .results import (
    TXN_WORKLOADS, human, mean_mops, measured, ordered_workloads, properties_ending,
    series_names, thread_counts, unique, with_series)
from .canvas import thread_word
from .figures import (
    busiest_workload, format_ns, mean_of, moved_items, option_sort_key, run_phase_latency,
    swept_value, sweeps)


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
        lines.extend(sweep_lines(runs))
        lines.extend(movement_lines(runs))
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


def sweep_lines(runs):
    """Per sweep (runs of one engine that differ in one engine option): per
    value, load and run phase Mops/s per thread count, slots and heap bytes
    per key after the load, the clean open time when measured, and the run
    phase's p50 and p99 at the largest thread count."""
    lines = []
    for engine, option, sweep in sweeps(runs):
        values = sorted(unique(swept_value(r, option) for r in sweep), key=option_sort_key)
        threads = thread_counts(sweep)
        head = [option]
        for t in threads:
            head += [f"load {t} thr", f"run {t} thr"]
        head += ["slots per key", "heap B/key", "clean open",
                 f"run p50 ({threads[-1]} thr)",
                 f"run p99 ({threads[-1]} thr)"]
        lines += [f"{engine}: runs that differ in {option} (Mops/s; space and open time "
                  "after the load):", "",
                  "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]

        def cell(v, fmt):
            return "-" if v is None else format(v, fmt)

        for v in values:
            mine = [r for r in sweep if swept_value(r, option) == v]
            row = [str(v)]
            for t in threads:
                at = [r for r in mine if r["threads"] == t]
                row.append(cell(mean_of([r["load"]["ops_per_s"] / 1e6 for r in at
                                         if r["load"] and r["load"]["ops"]]), ".2f"))
                row.append(cell(mean_of([r["run"]["ops_per_s"] / 1e6 for r in at if r["run"]]),
                                ".2f"))
            first = next((r["load"] for r in mine if r["load"] and r["load"]["ops"]), None)
            slots = first.get("slots") if first else None
            row.append(cell(slots / first["ops"] if slots else None, ".1f"))
            row.append(cell(first.get("bytes_per_key") if first else None, ".0f"))
            opens = [r["reopen"]["clean"]["open_ns"] / 1e6 for r in mine if r.get("reopen")]
            row.append(f"{min(opens):.2f} ms" if opens else "-")
            lat = next((run_phase_latency(r) for r in mine
                        if r["threads"] == threads[-1] and run_phase_latency(r)), None)
            row += [format_ns(lat["p50"]), format_ns(lat["p99"])] if lat else ["-", "-"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def movement_lines(runs):
    """Data movement in load phases that report a property *.items_moved:
    items and bytes moved per inserted key, splits, load factor and heap
    bytes per key, per series and key count."""
    loads = [r for r in runs if r["workload"] == "load" and r["load"] is not None
             and r["load"]["ops"] > 0 and moved_items(r) is not None]
    if not loads:
        return []
    lines = ["Data movement of splits and resizes during the load (per inserted key; "
             "the engines' *.items_moved, *.bytes_moved and *.splits):", "",
             "| series | threads | keys | items moved | bytes moved | splits | "
             "load factor | heap B/key |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def total(p, engine, counter):
        found = properties_ending(p, engine, counter)
        return sum(found.values()) if found else None

    for r in sorted(loads, key=lambda r: (r["series"], r["threads"], r["load"]["ops"])):
        p = r["load"]
        lf = p["load_factor"][-1][1] if p.get("load_factor") else None
        inserted = p["ops"]
        moved_bytes = total(p, r["engine"], "bytes_moved")
        splits = total(p, r["engine"], "splits")
        lines.append(f"| {r['series']} | {r['threads']} | {human(inserted)} | "
                     f"{moved_items(r) / inserted:.2f} | "
                     f"{'-' if moved_bytes is None else format(moved_bytes / inserted, '.1f')} | "
                     f"{'-' if splits is None else splits} | "
                     f"{'-' if lf is None else format(lf, '.2f')} | "
                     f"{'-' if p.get('bytes_per_key') is None else format(p['bytes_per_key'], '.0f')} |")
    lines.append("")
    return lines


def reopen_lines(runs):
    """Open time after a clean close and after a crash, per series and key
    count (the fastest of the runs measured), with space; runs of a sweep
    are in sweep_lines."""
    swept = {id(r) for _, _, sweep in sweeps(runs) for r in sweep}
    reopened = [r for r in runs if r.get("reopen") and id(r) not in swept]
    if not reopened:
        return []
    lines = ["Open time (Stats::open_ns; the fastest of the runs of each size):", "",
             "| series | keys | heap B/key | clean open | crash open | crash open per key |",
             "|---|---:|---:|---:|---:|---:|"]
    keyed = {}
    for r in reopened:
        keyed.setdefault((r["series"], r["reopen"]["clean"]["items"]), []).append(r["reopen"])
    for (name, items), opens in sorted(keyed.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        clean = min(o["clean"]["open_ns"] for o in opens) / 1e6
        crashes = [o["crash"]["open_ns"] for o in opens if o["crash"]]
        crash = f"{min(crashes) / 1e6:.2f} ms" if crashes else "-"
        per_key = f"{min(crashes) / items:.0f} ns" if crashes else "-"
        first = opens[0]["clean"]
        lines.append(f"| {name} | {human(items)} | {first['bytes_per_key']:.0f} | "
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
