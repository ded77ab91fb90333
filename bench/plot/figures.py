"""The figures of the table runs (engines and peers on pools, files or
DRAM). Each figure kind draws what its data holds and raises Skip when the
runs have nothing for it."""

from .results import (
    Skip, TXN_WORKLOADS, first_load_phase, human, mean_mops, measured, ordered_workloads,
    prop, thread_counts, unique, workload_label)
from .canvas import bar_panel_layout, rotate_if_crowded, thread_word


def plot_throughput(canvas):
    runs = canvas.runs
    values = mean_mops(runs)
    workloads = ordered_workloads(runs)
    threads = thread_counts(runs)
    names = canvas.series
    panel_w, cols = bar_panel_layout(len(threads), len(workloads), len(names))
    fig, axes = canvas.grid(len(threads), panel_w, 4.8, sharey=True, cols=cols)
    labels = [workload_label(w, runs) for w in workloads]
    width = 0.8 / len(names)
    for ax, t in zip(axes, threads):
        for i, name in enumerate(names):
            xs = [j for j, w in enumerate(workloads) if (name, t, w) in values]
            ys = [values[(name, t, workloads[j])] for j in xs]
            bars = ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], ys,
                          width, color=canvas.colour[name])
            if len(workloads) * len(names) <= 24:
                ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=1)
        ax.set_title(thread_word(t), fontsize=10)
        ax.set_xticks(range(len(workloads)), labels)
        rotate_if_crowded(ax, labels)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(throughput_unit(workloads))
    return canvas.finish(fig, "Throughput of the measured phase", names)


def throughput_unit(workloads):
    """The y-axis label: Mops/s, and what it means for transactions."""
    if any(w in TXN_WORKLOADS for w in workloads):
        return "throughput (Mops/s; txn: M transactions/s)"
    return "throughput (Mops/s)"


def plot_scaling(canvas):
    runs = canvas.runs
    threads = thread_counts(runs)
    if len(threads) < 2:
        raise Skip(f"only one thread count ({threads[0]}) in the input")
    values = mean_mops(runs)
    workloads = ordered_workloads(runs)
    fig, axes = canvas.grid(len(workloads), 4.2, 3.4, max_w=17.0)
    for ax, workload in zip(axes, workloads):
        for name in canvas.series:
            pts = [(t, values[(name, t, workload)]) for t in threads
                   if (name, t, workload) in values]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=canvas.colour[name])
        ax.set_title(workload_label(workload, runs).replace("\n", " "),
                     fontsize=10)
        if threads[-1] / threads[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(threads, [str(t) for t in threads])
        ax.minorticks_off()
        ax.set_xlabel("threads")
        ax.set_ylabel("M transactions/s" if workload in TXN_WORKLOADS else "Mops/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    return canvas.finish(fig, "Thread scaling of the measured phase",
                         canvas.series)


def merged_histogram(runs):
    """Sums the latency_ns.all histograms of the measured phases of runs."""
    counts = {}
    for r in runs:
        for bound, count in measured(r)["latency_ns"]["all"]["histogram"]:
            counts[bound] = counts.get(bound, 0) + count
    return sorted(counts.items())


def cdf_points(histogram):
    total = sum(count for _, count in histogram)
    xs, ys, running = [], [], 0
    for bound, count in histogram:
        running += count
        xs.append(bound)
        ys.append(running / total)
    return xs, ys


def plot_latency_cdf(canvas):
    top = thread_counts(canvas.runs)[-1]
    runs = [r for r in canvas.runs if r["threads"] == top]
    workloads = ordered_workloads(runs)
    fig, axes = canvas.grid(len(workloads), 4.2, 3.4, max_w=17.0)
    drawn = False
    for ax, workload in zip(axes, workloads):
        for name in canvas.series:
            mine = [r for r in runs
                    if r["series"] == name and r["workload"] == workload]
            histogram = merged_histogram(mine)
            if histogram:
                ax.plot(*cdf_points(histogram), color=canvas.colour[name])
                drawn = True
        ax.set_title(workload_label(workload, runs).replace("\n", " "),
                     fontsize=10)
        ax.set_xscale("log")
        ax.set_xlabel("latency (ns)")
        ax.set_ylabel("fraction of transactions ≤ x" if workload in TXN_WORKLOADS
                      else "fraction of ops ≤ x")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.grid(alpha=0.1, which="minor")
    if not drawn:
        canvas.plt.close(fig)
        raise Skip(f"no latency histogram at {thread_word(top)}")
    return canvas.finish(fig, f"Latency CDF of the measured phase · "
                         f"{thread_word(top)}", canvas.series)


def plot_load_timeseries(canvas):
    with_load = [r for r in canvas.runs if r["load"] is not None]
    if not with_load:
        raise Skip("no run has a load phase")
    top = thread_counts(with_load)[-1]
    fig, axes = canvas.grid(1, 10.0, 4.6)
    shown = []
    for name in canvas.series:
        phase = first_load_phase(with_load, name, top,
                                 lambda p: p["timeseries"]["ops_per_s"])
        if phase is None:
            continue
        series = phase["timeseries"]
        step = series["interval_s"]
        ys = [v / 1e6 for v in series["ops_per_s"]]
        edges = [step * i for i in range(len(ys) + 1)]
        if edges[-2] < phase["seconds"] < edges[-1]:
            edges[-1] = phase["seconds"]  # the last interval was cut short
        axes[0].stairs(ys, edges, baseline=None, color=canvas.colour[name],
                       lw=1.2)
        shown.append(name)
    if not shown:
        canvas.plt.close(fig)
        raise Skip(f"no load-phase time series at {thread_word(top)}")
    ax = axes[0]
    ax.set_xlabel("seconds since the start of the load")
    ax.set_ylabel("Mops/s")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return canvas.finish(fig, f"Load-phase throughput over time · "
                         f"{thread_word(top)}", shown)


def plot_load_factor(canvas):
    with_curve = [r for r in canvas.runs
                  if r["load"] is not None and r["load"]["load_factor"]]
    if not with_curve:
        raise Skip("no load phase reports a load_factor curve")
    fig, axes = canvas.grid(1, 10.0, 4.6)
    ax = axes[0]
    shown = []
    for name in canvas.series:
        mine = [r for r in with_curve if r["series"] == name]
        if not mine:
            continue
        top = thread_counts(mine)[-1]
        phase = first_load_phase(mine, name, top, lambda p: True)
        xs, ys = zip(*phase["load_factor"])
        ax.plot(xs, ys, color=canvas.colour[name], lw=1.2)
        shown.append(name)
    ax.xaxis.set_major_formatter(canvas.plt.FuncFormatter(
        lambda v, _: human(v)))
    ax.set_xlabel("keys inserted")
    ax.set_ylabel("load factor")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return canvas.finish(fig, "Load factor during the load phase", shown)


def busiest_workload(runs, op):
    """The workload whose run phase has the largest share of op (None if
    no run phase has any)."""
    best, share = None, 0.0
    for r in runs:
        if r["run"] is None:
            continue
        s = r["run"]["mix"].get(op, 0)
        if s > share:
            best, share = r["workload"], s
    return best


def format_ns(ns):
    return f"{ns / 1000:.2g} µs" if ns >= 1000 else f"{ns:.0f} ns"


def plot_op_latency_cdf(canvas):
    top = thread_counts(canvas.runs)[-1]
    runs = [r for r in canvas.runs if r["threads"] == top]
    panels = []
    for op, word in (("insert", "insertion"), ("read", "search")):
        workload = busiest_workload(runs, op)
        if workload is not None:
            panels.append((op, word, workload))
    if not panels:
        raise Skip(f"no run phase with inserts or reads at {thread_word(top)}")
    fig, axes = canvas.grid(len(panels), 5.0, 3.6, max_w=11.0)
    shown = []
    for ax, (op, word, workload) in zip(axes, panels):
        notes = []
        for name in canvas.series:
            mine = [r for r in runs if r["series"] == name
                    and r["workload"] == workload
                    and op in r["run"]["latency_ns"]]
            if not mine:
                continue
            lat = mine[0]["run"]["latency_ns"][op]
            colour = canvas.colour[name]
            ax.plot(*cdf_points(lat["histogram"]), color=colour)
            ax.plot([lat["p99"]], [0.99], marker="o", color=colour, ms=5)
            ax.axvline(lat["p99"], color=colour, ls=":", lw=0.9)
            notes.append((f"{name}: p99 {format_ns(lat['p99'])}", colour))
            if name not in shown:
                shown.append(name)
        ax.axhline(0.99, color="0.5", lw=0.6, ls="--")
        for i, (text, colour) in enumerate(notes):
            ax.text(0.97, 0.45 - 0.08 * i, text, transform=ax.transAxes,
                    fontsize=8, color=colour, va="top", ha="right",
                    bbox={"facecolor": "white", "edgecolor": "none",
                          "alpha": 0.8, "pad": 1})
        ax.set_title(f"{word} latency · workload {workload}", fontsize=10)
        ax.set_xscale("log")
        ax.set_xlabel("latency (ns)")
        ax.set_ylabel(f"fraction of {op}s ≤ x")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    return canvas.finish(fig, f"Insertion and search latency · "
                         f"{thread_word(top)} (dot and dotted line: p99)",
                         shown)


def bucket_bits_of(run):
    options = run.get("options") or {}
    return options.get("nehash_bucket_bits")


def plot_bucket_bits(canvas):
    sweep = [r for r in canvas.runs if bucket_bits_of(r) is not None]
    bits = sorted(set(bucket_bits_of(r) for r in sweep))
    if len(bits) < 2:
        raise Skip("no nehash runs of several bucket-directory bits")
    others = [r for r in canvas.runs if bucket_bits_of(r) is None]
    threads = thread_counts(sweep)
    palette = canvas.plt.get_cmap("tab10")
    colour = {t: palette(i) for i, t in enumerate(threads)}

    def search_phase(r):
        run = r["run"]
        return run if run is not None and run["mix"].get("read", 0) == 1 else None

    panels = [
        ("insert throughput (load phase)", "Mops/s",
         lambda r: r["load"]["ops_per_s"] / 1e6 if r["load"] else None),
        ("search throughput (run phase, 100% read)", "Mops/s",
         lambda r: search_phase(r)["ops_per_s"] / 1e6 if search_phase(r) else None),
        ("pool heap bytes per key after the load", "bytes per key",
         lambda r: r["load"]["bytes_per_key"] if r["load"] else None),
    ]
    fig, axes = canvas.grid(len(panels), 4.4, 3.5, max_w=14.0)
    handles, labels = [], []
    for ax, (title, unit, value) in zip(axes, panels):
        for t in threads:
            pts = {}
            for r in sweep:
                v = value(r) if r["threads"] == t else None
                if v is not None:
                    pts.setdefault(bucket_bits_of(r), []).append(v)
            if not pts:
                continue
            xs = sorted(pts)
            line, = ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs],
                            marker="o", color=colour[t])
            if ax is axes[0]:
                handles.append(line)
                labels.append(f"nehash, {thread_word(t)}")
            for i, name in enumerate(unique(r["series"] for r in others)):
                vs = [value(r) for r in others
                      if r["series"] == name and r["threads"] == t]
                vs = [v for v in vs if v is not None]
                if vs:
                    ref = ax.axhline(sum(vs) / len(vs), color=colour[t],
                                     ls=["--", "-.", ":"][i % 3], lw=1)
                    if ax is axes[0]:
                        handles.append(ref)
                        labels.append(f"{name}, {thread_word(t)}")
        ax.axvline(6, color="0.6", lw=0.8)
        ax.text(6, 0.02, " b=6 (paper)", transform=ax.get_xaxis_transform(),
                fontsize=7, color="0.4")
        ax.set_xticks(bits)
        ax.set_xlabel("bucket-directory bits b (2^b buckets per group)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(handles, labels, fontsize=7, loc="lower right")
    return canvas.finish(fig, "nehash bucket-directory bits (NEHASH paper §6.2)", [])


def pmeh_option(run, name):
    options = run.get("options") or {}
    return options.get(name)


def plot_data_movement(canvas):
    runs = [r for r in canvas.runs
            if r["engine"] in ("pmeh", "nehash") and r["load"] is not None
            and prop(r["load"], r["engine"], "items_moved") is not None and r["load"]["ops"] > 0]
    if not runs:
        raise Skip("no pmeh or nehash load phase with items_moved")
    sizes = sorted(set(r["load"]["ops"] for r in runs))
    names = [n for n in canvas.series if any(r["series"] == n for r in runs)]
    fig, axes = canvas.grid(2, 5.4, 3.8, max_w=11.5)
    palette = canvas.plt.get_cmap("viridis")
    width = 0.8 / len(sizes)

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    panels = [
        (axes[0], "slots moved per inserted key",
         lambda r: prop(r["load"], r["engine"], "items_moved") / r["load"]["ops"]),
        (axes[1], "pool heap bytes per key after the load",
         lambda r: r["load"].get("bytes_per_key")),
    ]
    for ax, title, value in panels:
        for j, n in enumerate(sizes):
            xs, ys = [], []
            for i, name in enumerate(names):
                v = mean(value(r) for r in runs if r["series"] == name and r["load"]["ops"] == n)
                if v is not None:
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(v)
            ax.bar(xs, ys, width * 0.9, color=palette(j / max(1, len(sizes) - 1) * 0.8),
                   label=f"{human(n)} keys")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        rotate_if_crowded(ax, names, limit=4)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    ax = axes[0]
    for i, name in enumerate(names):
        mine = [r for r in runs if r["series"] == name]
        k = pmeh_option(mine[0], "pmeh_split_bits") if mine[0]["engine"] == "pmeh" else None
        expected = 1.44 / k if k else (0.72 if mine[0]["engine"] == "nehash" else None)
        if expected is not None:
            ax.plot([i - 0.45, i + 0.45], [expected, expected], color="crimson", lw=1.2, ls="--")
    ax.plot([], [], color="crimson", ls="--", label="expected: 1.44/k (pmeh), 0.72 (2-split)")
    ax.set_ylabel("per inserted key")
    ax.legend(fontsize=7)
    axes[1].set_ylabel("bytes per key")
    return canvas.finish(fig, "Data movement of splits during a load (design §12.4)", [])


def plot_split_step(canvas):
    runs = [r for r in canvas.runs if pmeh_option(r, "pmeh_split_step") is not None
            and r["run"] is not None and "insert" in r["run"]["latency_ns"]]
    steps = sorted(set(pmeh_option(r, "pmeh_split_step") for r in runs))
    if len(steps) < 2:
        raise Skip("no pmeh runs of several split steps with inserts")
    top = thread_counts(runs)[-1]
    runs = [r for r in runs if r["threads"] == top]
    fig, axes = canvas.grid(2, 5.2, 3.8, max_w=11.0)
    palette = canvas.plt.get_cmap("plasma")
    colour = {b: palette(i / max(1, len(steps)) * 0.85) for i, b in enumerate(steps)}
    stats = {}
    for b in steps:
        mine = [r for r in runs if pmeh_option(r, "pmeh_split_step") == b]
        if not mine:
            continue
        lat = mine[0]["run"]["latency_ns"]["insert"]
        axes[0].plot(*cdf_points(lat["histogram"]), color=colour[b], label=f"B={b}")
        stats[b] = lat
    ax = axes[0]
    ax.set_xscale("log")
    ax.set_xlabel("insert latency (ns)")
    ax.set_ylabel("fraction of inserts ≤ x")
    ax.set_ylim(0, 1.02)
    ax.axhline(0.99, color="0.5", lw=0.6, ls="--")
    ax.set_title(f"insert latency CDF · {thread_word(top)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="buckets moved per write", title_fontsize=7)
    ax = axes[1]
    marks = [("p50", "o"), ("p99", "s"), ("p999", "^"), ("max", "x")]
    xs = list(range(len(stats)))
    for key, marker in marks:
        ax.plot(xs, [stats[b][key] / 1e3 for b in stats], marker=marker,
                label="p99.9" if key == "p999" else key)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"B={b}" for b in stats])
    ax.set_yscale("log")
    ax.set_ylabel("insert latency (µs)")
    ax.set_title("percentiles by split step (B=0: the whole split at once)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return canvas.finish(fig, "pmeh gradual splits: insert latency by split step B", [])


def plot_open_time(canvas):
    reopened = [r for r in canvas.runs if r.get("reopen")]
    if not reopened:
        raise Skip("no run has a reopen phase (pmhash-bench --reopen)")
    fig, axes = canvas.grid(2, 5.2, 3.8, max_w=11.0)
    ax = axes[0]
    shown = []
    for name in canvas.series:
        mine = [r for r in reopened if r["series"] == name]
        sizes = sorted(set(r["reopen"]["clean"]["items"] for r in mine))
        if len(sizes) < 2:
            continue
        for kind, style in (("clean", "-"), ("crash", "--")):
            pts = {}
            for r in mine:
                m = r["reopen"][kind]
                if m is not None:
                    pts.setdefault(m["items"], []).append(m["open_ns"] / 1e6)
            if pts:
                xs = sorted(pts)
                ax.plot(xs, [min(pts[x]) for x in xs], ls=style, marker="o",
                        color=canvas.colour[name])
        shown.append(name)
    plain = canvas.plt.FuncFormatter(lambda v, _: f"{v:g}")
    # Minor ticks of a log axis: label 2x and 5x only.
    sparse = canvas.plt.FuncFormatter(
        lambda v, _: f"{v:g}" if f"{v:.1e}"[0] in "25" else "")
    sparse_keys = canvas.plt.FuncFormatter(
        lambda v, _: human(v) if f"{v:.1e}"[0] in "25" else "")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(canvas.plt.FuncFormatter(lambda v, _: human(v)))
    ax.xaxis.set_minor_formatter(sparse_keys)
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(sparse)
    ax.set_xlabel("keys in the pool")
    ax.set_ylabel("open time (ms, Stats::open_ns)")
    ax.set_title("open time against keys (solid: clean, dashed: crash)",
                 fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax = axes[1]
    nehash = [r for r in reopened if r["engine"] == "nehash"]
    pmeh = [r for r in reopened if r["engine"] == "pmeh"]
    for kind, marker in (("clean", "o"), ("crash", "x")):
        for r in pmeh:
            m = r["reopen"][kind]
            segments = None if m is None else prop(m, "pmeh", "segments")
            if not segments:
                continue
            ax.scatter([segments], [m["open_ns"] / 1e6], marker=marker,
                       color="crimson", s=28)
            if kind == "clean":
                ax.annotate(f"pmeh k={pmeh_option(r, 'pmeh_split_bits')}, {human(m['items'])} keys",
                            (segments, m["open_ns"] / 1e6), fontsize=6,
                            xytext=(3, -8), textcoords="offset points")
    if nehash or pmeh:
        palette = canvas.plt.get_cmap("viridis")
        # One run per (b, keys): the sweep measures each b at every thread
        # count, and the open does not depend on the load's threads.
        first = {}
        for r in nehash:
            first.setdefault((bucket_bits_of(r), r["reopen"]["clean"]["items"]), r)
        for kind, marker in (("clean", "o"), ("crash", "x")):
            for r in first.values():
                m = r["reopen"][kind]
                groups = None if m is None else prop(m, "nehash", "groups")
                if not groups:
                    continue
                b = bucket_bits_of(r)
                shade = palette(((b or 6) - 1) / 9)
                ax.scatter([groups], [m["open_ns"] / 1e6], marker=marker,
                           color=shade, s=28)
                if kind == "clean":
                    ax.annotate(f"b={b}, {human(m['items'])} keys",
                                (groups, m["open_ns"] / 1e6), fontsize=6,
                                xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(canvas.plt.FuncFormatter(lambda v, _: human(v)))
        ax.xaxis.set_minor_formatter(sparse_keys)
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(sparse)
        ax.set_title("open time against nehash's bucket groups and pmeh's segments "
                     "(o clean, x crash)", fontsize=9)
        ax.set_xlabel("bucket groups (nehash) / segments (pmeh, red)")
        ax.set_ylabel("open time (ms)")
        ax.grid(alpha=0.3, which="both")
    else:
        ax.set_visible(False)
    return canvas.finish(fig, "Open (rebuild) time after a clean close and after a crash",
                         shown)


FIGURES = [
    ("throughput.png", plot_throughput),
    ("scaling.png", plot_scaling),
    ("latency_cdf.png", plot_latency_cdf),
    ("load_timeseries.png", plot_load_timeseries),
    ("load_factor.png", plot_load_factor),
    ("op_latency_cdf.png", plot_op_latency_cdf),
    ("bucket_bits.png", plot_bucket_bits),
    ("open_time.png", plot_open_time),
    ("data_movement.png", plot_data_movement),
    ("split_step.png", plot_split_step),
]
# Written only when --figures names them.
ON_REQUEST = {"op_latency_cdf"}


# --------------------------------------------------------------------------
# --markdown: the tables of docs/results/README.md, from the same files.
# --------------------------------------------------------------------------
