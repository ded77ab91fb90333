"""The figures of the runs on memory nodes (bench/remote_bench.h: runs of
kind "memnode"), drawn when the input has such runs.

  remote_throughput.png  one subplot per setting: Mops/s per workload, one
                         bar per engine and client count.
  remote_ratio.png       one subplot per setting: the first engine's Mops/s
                         over the second's, per workload, one bar per client
                         count; a line at 1. Only with two engines or more.
  remote_cost.png        round trips and payload bytes per operation per
                         workload and engine, at the fewest clients on the
                         first setting (the counters do not depend on
                         transport).

A setting is a transport with its injected latency: "shm 0 ns", "shm 2000
ns", "tcp". A run's phase is its load (workload insert) or its run.
"""

import os
from collections import OrderedDict


def rows_of(runs):
    """One row per memory-node run: engine, setting, clients, workload,
    mops, rtt (round trips per operation) and bytes (per operation)."""
    rows = []
    for r in runs:
        phase = r["load"] if r["load"] is not None else r["run"]
        rows.append({
            "engine": r["engine"],
            "setting": r["transport"] if r["transport"] == "tcp"
            else f'{r["transport"]} {int(r["latency_ns"])} ns',
            "clients": int(r["clients"]),
            "workload": r["workload"],
            "mops": phase["ops_per_s"] / 1e6,
            "rtt": phase["round_trips_per_op"] or 0.0,
            "bytes": phase["bytes_per_op"] or 0.0,
        })
    return rows


def distinct(rows, key):
    return list(OrderedDict.fromkeys(r[key] for r in rows))


def value(rows, **match):
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            return r
    return None


def throughput(plt, rows, out):
    settings, engines = distinct(rows, "setting"), distinct(rows, "engine")
    clients, workloads = sorted(distinct(rows, "clients")), distinct(rows, "workload")
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 4), squeeze=False)
    bars = [(e, c) for e in engines for c in clients]
    width = 0.8 / len(bars)
    for ax, setting in zip(axes[0], settings):
        for i, (e, c) in enumerate(bars):
            ys = []
            for w in workloads:
                r = value(rows, setting=setting, engine=e, clients=c, workload=w)
                ys.append(r["mops"] if r else 0)
            xs = [k + (i - (len(bars) - 1) / 2) * width for k in range(len(workloads))]
            ax.bar(xs, ys, width, label=f"{e}, {c} client{'s' if c > 1 else ''}")
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_title(setting)
        ax.set_ylabel("Mops/s")
    legend_below(fig, axes[0][0], len(bars))
    return save(plt, fig, out, "remote_throughput.png")


def ratio(plt, rows, out):
    engines = distinct(rows, "engine")
    if len(engines) < 2:
        return None
    first, second = engines[0], engines[1]
    settings, workloads = distinct(rows, "setting"), distinct(rows, "workload")
    clients = sorted(distinct(rows, "clients"))
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 4), squeeze=False,
                             sharey=True)
    width = 0.8 / len(clients)
    for ax, setting in zip(axes[0], settings):
        for i, c in enumerate(clients):
            ys = []
            for w in workloads:
                a = value(rows, setting=setting, engine=first, clients=c, workload=w)
                b = value(rows, setting=setting, engine=second, clients=c, workload=w)
                ys.append(a["mops"] / b["mops"] if a and b and b["mops"] > 0 else 0)
            xs = [k + (i - (len(clients) - 1) / 2) * width for k in range(len(workloads))]
            ax.bar(xs, ys, width, label=f"{c} client{'s' if c > 1 else ''}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_title(setting)
    axes[0][0].set_ylabel(f"Mops/s, {first} / {second}")
    legend_below(fig, axes[0][0], len(clients))
    return save(plt, fig, out, "remote_ratio.png")


def cost(plt, rows, out):
    setting = distinct(rows, "setting")[0]
    clients = min(distinct(rows, "clients"))
    engines, workloads = distinct(rows, "engine"), distinct(rows, "workload")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(engines)
    for ax, key, label in ((axes[0], "rtt", "round trips per operation"),
                           (axes[1], "bytes", "payload bytes per operation")):
        for i, e in enumerate(engines):
            ys = []
            for w in workloads:
                r = value(rows, setting=setting, engine=e, clients=clients, workload=w)
                ys.append(r[key] if r else 0)
            xs = [k + (i - (len(engines) - 1) / 2) * width for k in range(len(workloads))]
            ax.bar(xs, ys, width, label=e)
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_ylabel(label)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{setting}, {clients} client{'s' if clients > 1 else ''}")
    return save(plt, fig, out, "remote_cost.png")


def legend_below(fig, ax, columns):
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize="small")
    fig.tight_layout(rect=(0, 0.08, 1, 1))


def save(plt, fig, out, name):
    if not fig.legends:
        fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_remote_figures(plt, runs, out_dir, only=None):
    """Draws the figures above (those `only` names, or all) from the
    memory-node runs; returns the paths written."""
    rows = rows_of(runs)
    paths = []
    for stem, fn in (("remote_throughput", throughput), ("remote_ratio", ratio),
                     ("remote_cost", cost)):
        if only is not None and stem not in only:
            continue
        path = fn(plt, rows, str(out_dir))
        if path:
            paths.append(path)
    return paths
