"""The figures of the table runs (engines and peers on pools, files or
DRAM). Each figure kind draws what its data holds and raises Skip when the
runs have nothing for it."""

import json

from .results import (
    Skip, TXN_WORKLOADS, engine_options, first_load_phase, human, mean_mops, measured,
    ordered_workloads, prop, properties_ending, thread_counts, unique, workload_label)
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


def option_sort_key(value):
    """Numbers by value, then anything else (booleans, words) by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def sweeps(runs):
    """[(engine, option, runs)] of every sweep: the runs of one engine
    whose engine options differ in exactly one option, taking two or more
    values; option is its name within the engine. An engine whose runs
    differ in several options has no sweep (the runs cannot be lined up
    along one axis)."""
    found = []
    for engine in unique(r["engine"] for r in runs):
        mine = [r for r in runs if r["engine"] == engine and r.get("options")]
        if len(mine) < 2:
            continue
        options = [engine_options(r) for r in mine]
        names = unique(k for o in options for k in o)
        varying = [k for k in names
                   if len(unique(json.dumps(o.get(k)) for o in options)) > 1]
        if len(varying) == 1:
            found.append((engine, varying[0], mine))
    return found


def swept_value(run, option):
    return engine_options(run).get(option)


def mean_of(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def run_phase_latency(run):
    """The run phase's latency of all operations, or None."""
    return run["run"]["latency_ns"]["all"] if run["run"] is not None else None


def plot_sweep(canvas):
    """One figure per sweep (runs of one engine that differ in one engine
    option), named after the option: load and run phase throughput and
    heap bytes per key against the option's value, one line per thread
    count, the other series of the input as dashed reference lines; the
    run phase's latency percentiles and CDF per value at the largest thread
    count."""
    found = sweeps(canvas.runs)
    if not found:
        raise Skip("no runs of one engine that differ in exactly one engine option")
    out = []
    for engine, option, sweep in found:
        fig = sweep_figure(canvas, engine, option, sweep)
        out.append((f"{option}.png", fig))
    return out


def sweep_figure(canvas, engine, option, sweep):
    values = sorted(unique(swept_value(r, option) for r in sweep), key=option_sort_key)
    position = {json.dumps(v): i for i, v in enumerate(values)}

    def at(r):
        return position[json.dumps(swept_value(r, option))]

    others = [r for r in canvas.runs if r["engine"] != engine]
    threads = thread_counts(sweep)
    palette = canvas.plt.get_cmap("tab10")
    colour = {t: palette(i) for i, t in enumerate(threads)}
    workloads = ordered_workloads([r for r in sweep if r["run"] is not None])
    panels = [("load phase throughput", "Mops/s",
               lambda r: r["load"]["ops_per_s"] / 1e6 if r["load"] and r["load"]["ops"] else None)]
    for w in workloads:
        panels.append((f"run phase throughput · workload {w}", "Mops/s",
                       lambda r, w=w: r["run"]["ops_per_s"] / 1e6
                       if r["run"] is not None and r["workload"] == w else None))
    panels.append(("pool heap bytes per key after the load", "bytes per key",
                   lambda r: r["load"].get("bytes_per_key") if r["load"] else None))
    top = threads[-1]
    latency_runs = [r for r in sweep if r["threads"] == top and run_phase_latency(r)]
    fig, axes = canvas.grid(len(panels) + (2 if latency_runs else 0), 4.4, 3.5, max_w=14.0)
    handles, labels = [], []
    for ax, (title, unit, value) in zip(axes, panels):
        drawn = False
        for t in threads:
            pts = {}
            for r in sweep:
                v = value(r) if r["threads"] == t else None
                if v is not None:
                    pts.setdefault(at(r), []).append(v)
            if not pts:
                continue
            xs = sorted(pts)
            line, = ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs],
                            marker="o", color=colour[t])
            drawn = True
            if f"{engine}, {thread_word(t)}" not in labels:
                handles.append(line)
                labels.append(f"{engine}, {thread_word(t)}")
            for i, name in enumerate(unique(r["series"] for r in others)):
                v = mean_of(value(r) for r in others if r["series"] == name and r["threads"] == t)
                if v is not None:
                    ref = ax.axhline(v, color=colour[t], ls=["--", "-.", ":"][i % 3], lw=1)
                    if f"{name}, {thread_word(t)}" not in labels:
                        handles.append(ref)
                        labels.append(f"{name}, {thread_word(t)}")
        if not drawn:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="0.5")
        sweep_axis(ax, option, values)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if latency_runs:
        shade = canvas.plt.get_cmap("plasma")
        ax = axes[len(panels)]
        stats = {}
        for i, v in enumerate(values):
            mine = [r for r in latency_runs if at(r) == i]
            if not mine:
                continue
            lat = run_phase_latency(mine[0])
            ax.plot(*cdf_points(lat["histogram"]), color=shade(i / max(1, len(values)) * 0.85),
                    label=f"{option}={v}")
            stats[i] = lat
        ax.set_xscale("log")
        ax.set_xlabel("run phase latency (ns)")
        ax.set_ylabel("fraction of operations ≤ x")
        ax.set_ylim(0, 1.02)
        ax.axhline(0.99, color="0.5", lw=0.6, ls="--")
        ax.set_title(f"run phase latency CDF · {thread_word(top)}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax = axes[len(panels) + 1]
        for key, marker in (("p50", "o"), ("p99", "s"), ("p999", "^"), ("max", "x")):
            xs = sorted(stats)
            ax.plot(xs, [stats[x][key] / 1e3 for x in xs], marker=marker,
                    label="p99.9" if key == "p999" else key)
        sweep_axis(ax, option, values)
        ax.set_yscale("log")
        ax.set_ylabel("run phase latency (µs)")
        ax.set_title(f"latency percentiles · {thread_word(top)}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0].legend(handles, labels, fontsize=7, loc="lower right")
    return canvas.finish(fig, f"{engine}: runs that differ in one engine option, {option}", [])


def sweep_axis(ax, option, values):
    """The x axis of a sweep panel: one evenly spaced tick per value."""
    ax.set_xticks(range(len(values)), [str(v).lower() if isinstance(v, bool) else str(v)
                                       for v in values])
    ax.set_xlim(-0.5, len(values) - 0.5)
    ax.set_xlabel(option)


def moved_items(run):
    """Items the engine moved during the load phase: the sum of its
    properties named "*.items_moved" (None when it has none)."""
    found = properties_ending(run["load"], run["engine"], "items_moved")
    return sum(found.values()) if found else None


def plot_data_movement(canvas):
    runs = [r for r in canvas.runs
            if r["load"] is not None and r["load"]["ops"] > 0 and moved_items(r) is not None]
    if not runs:
        raise Skip("no load phase with a property *.items_moved")
    sizes = sorted(set(r["load"]["ops"] for r in runs))
    names = [n for n in canvas.series if any(r["series"] == n for r in runs)]
    fig, axes = canvas.grid(2, 5.4, 3.8, max_w=11.5)
    palette = canvas.plt.get_cmap("viridis")
    width = 0.8 / len(sizes)
    panels = [
        (axes[0], "items moved per inserted key (the engine's *.items_moved)",
         lambda r: moved_items(r) / r["load"]["ops"]),
        (axes[1], "pool heap bytes per key after the load",
         lambda r: r["load"].get("bytes_per_key")),
    ]
    for ax, title, value in panels:
        for j, n in enumerate(sizes):
            xs, ys = [], []
            for i, name in enumerate(names):
                v = mean_of(value(r) for r in runs if r["series"] == name and r["load"]["ops"] == n)
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
    axes[0].set_ylabel("per inserted key")
    axes[0].legend(fontsize=7)
    axes[1].set_ylabel("bytes per key")
    return canvas.finish(fig, "Data movement of the engines' splits and resizes during a load", [])


def size_property(run, names):
    """The one of names ("<engine>.<property>", from --size-property) that
    belongs to the run's engine, or None."""
    for name in names:
        if name.split(".", 1)[0] == run["engine"] and "." in name:
            return name
    return None


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
    # One run per (series, keys, size): the open does not depend on the
    # load's threads.
    first = {}
    for r in reopened:
        size_name = size_property(r, canvas.size_properties)
        if size_name is not None:
            first.setdefault((r["series"], r["reopen"]["clean"]["items"]), (r, size_name))
    for kind, marker in (("clean", "o"), ("crash", "x")):
        for r, size_name in first.values():
            m = r["reopen"][kind]
            size = None if m is None else prop(m, r["engine"], size_name.split(".", 1)[1])
            if not size:
                continue
            ax.scatter([size], [m["open_ns"] / 1e6], marker=marker,
                       color=canvas.colour[r["series"]], s=28)
            if kind == "clean":
                ax.annotate(f"{r['series']}, {human(m['items'])} keys",
                            (size, m["open_ns"] / 1e6), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
    if first:
        names = unique(name for _, name in first.values())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(canvas.plt.FuncFormatter(lambda v, _: human(v)))
        ax.xaxis.set_minor_formatter(sparse_keys)
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(sparse)
        ax.set_title("open time against the structure count (o clean, x crash)", fontsize=9)
        ax.set_xlabel(" / ".join(names))
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
    ("sweep", plot_sweep),
    ("open_time.png", plot_open_time),
    ("data_movement.png", plot_data_movement),
]
# Written only when --figures names them.
ON_REQUEST = {"op_latency_cdf"}


# --------------------------------------------------------------------------
# --markdown: the tables of docs/results/README.md, from the same files.
# --------------------------------------------------------------------------
