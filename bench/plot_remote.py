#!/usr/bin/env python3
"""Plots what pmhash-bench wrote with --csv for the memory-node engines as PNG figures.

    bench/plot_remote.py [--out DIR] RUNS.csv

Set-up: scripts/bootstrap-plot.sh puts matplotlib into .venv/; started by
an interpreter without it, this script re-runs itself under .venv/bin/python.

Input: one row per (engine, transport, latency_ns, clients, workload) with
its Mops/s ("mops") and per-operation counters (the columns the benchmark
prints; bench/remote_bench.cc).  A setting is a transport with its injected
latency: "shm 0 ns", "shm 2000 ns", "tcp".

Figures (written into DIR, default the CSV's directory; each path printed)
-------
  remote_throughput.png  one subplot per setting: Mops/s per workload, one
                         bar per engine and client count.
  remote_ratio.png       one subplot per setting: the first engine's Mops/s
                         over the second's (e.g. sephash / race), per
                         workload, one bar per client count; a line at 1.
  remote_cost.png        round trips and payload bytes per operation per
                         workload and engine, at one client on the first
                         setting (the counters do not depend on transport).

Exits 1 with a one-line message when the file cannot be used.
"""
import argparse
import csv
import os
import sys
from collections import OrderedDict

NEEDED = ("engine", "transport", "latency_ns", "clients", "workload", "mops",
          "round_trips_per_op", "bytes_per_op")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "python")
        if os.path.abspath(sys.executable) != os.path.abspath(venv) and os.path.exists(venv):
            os.execv(venv, [venv] + sys.argv)
        sys.exit("plot_remote.py: no matplotlib (run scripts/bootstrap-plot.sh)")


def load(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot_remote.py: {path}: {e.strerror}")
    if not rows:
        sys.exit(f"plot_remote.py: {path}: no rows")
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        sys.exit(f"plot_remote.py: {path}: no column {', '.join(missing)}")
    out = []
    for n, r in enumerate(rows, start=2):
        try:
            out.append({
                "engine": r["engine"],
                "setting": r["transport"] if r["transport"] == "tcp"
                else f'{r["transport"]} {int(r["latency_ns"])} ns',
                "clients": int(r["clients"]),
                "workload": r["workload"],
                "mops": float(r["mops"]),
                "rtt": float(r["round_trips_per_op"]),
                "bytes": float(r["bytes_per_op"]),
            })
        except ValueError as e:
            sys.exit(f"plot_remote.py: {path}: line {n}: {e}")
    return out


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


def main():
    ap = argparse.ArgumentParser(description="Plots pmhash-bench --csv output of the memory-node engines.")
    ap.add_argument("csv")
    ap.add_argument("--out", help="directory of the figures (default: the CSV's)")
    args = ap.parse_args()
    rows = load(args.csv)
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = args.out or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out, exist_ok=True)
    for fn in (throughput, ratio, cost):
        path = fn(plt, rows, out)
        if path:
            print(path)


if __name__ == "__main__":
    main()
