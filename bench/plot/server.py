#!/usr/bin/env python3
"""Figures of one scripts/bench-server.sh sitting (pmhash-server against
redis-server), from the sitting's JSON file.

    bench/plot/server.py SITTING.json [--out DIR]

Writes into DIR (default: the JSON file's folder), one figure per part the
sitting ran, each printed:
  server_throughput.png  redis-benchmark requests/s, log y: one row of
                         panels per medium, one panel per value size; x =
                         command and pipeline depth, one bar per server.
  server_ratio.png       each pmhash configuration's throughput over its
                         Redis peer's (strict against appendfsync always,
                         epoch against everysec; GET against redis-none),
                         log y with the 1x line marked.
  server_restart.png     time from restart after SIGKILL until PING is
                         answered, against keys (log-log), one line per
                         server, one panel per medium.
  server_ycsb.png        YCSB operations/s per phase (load, then the
                         workloads run), one bar per server, one panel per
                         medium.
A part with no rows draws nothing (a note on stderr). Servers keep one
colour in every figure: the Redis configurations first, then pmhash's in
the order the sitting lists them (`pmhash engines --modes pool`).

The rows are what scripts/bench-server.sh writes; its meta object gives the
sizes, which each figure's title repeats. Exit status: 0 figures written,
2 bad input (one line on stderr).
"""

import argparse
import json
import sys
from pathlib import Path

# Run as a file (bench/plot/server.py): make the package importable by its name.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plot.canvas import import_matplotlib  # noqa: E402

TESTS = ("SET", "GET", "INCR", "MSET (10 keys)")
PHASES = ("load", "a", "b", "c", "f", "d")


# The numbers each kind of row must have.
NUMBERS = {"throughput": ("value_bytes", "pipeline", "rps"),
           "groups_off": ("value_bytes", "pipeline", "rps"),
           "restart": ("keys", "ready_us"),
           "ycsb": ("ops_per_s",)}


class InputError(Exception):
    pass


def read_sitting(path):
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InputError(f"{path}: not a bench-server sitting (no rows)")
    for i, r in enumerate(doc["rows"]):
        if not isinstance(r, dict) or r.get("kind") not in NUMBERS:
            raise InputError(f"{path}: row {i} has no known kind")
        if not isinstance(r.get("server"), str) or not isinstance(r.get("medium"), str):
            raise InputError(f"{path}: row {i} names no server or medium")
        for field in NUMBERS[r["kind"]]:
            value = r.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InputError(f"{path}: row {i} ({r['kind']}) has no number {field}")
        if r["kind"] in ("throughput", "groups_off") and not isinstance(r.get("test"), str):
            raise InputError(f"{path}: row {i} ({r['kind']}) names no test")
    return doc


def server_order(rows):
    """Redis's configurations first, then pmhash's in order of appearance."""
    seen = []
    for r in rows:
        if r["server"] not in seen:
            seen.append(r["server"])
    return sorted(seen, key=lambda s: (not s.startswith("redis-"), seen.index(s)))


def peer(server, test=""):
    """The Redis configuration a pmhash configuration is compared with."""
    if test.startswith("GET"):
        return "redis-none"
    return "redis-everysec" if server.endswith(":epoch") else "redis-always"


def colours(plt, servers):
    cmap = plt.get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(servers)}


def test_order(name):
    return (TESTS.index(name) if name in TESTS else len(TESTS), name)


def command_panels(plt, rows, servers, colour, value, ylabel):
    """One panel per medium (row) and value size (column): x = command and
    pipeline depth, one bar per server, the bar's height value(index,
    server, test, pipeline) (None: no bar), log y. Returns the figure, its
    axes, and whether any bar was drawn."""
    media = sorted({r["medium"] for r in rows})
    sizes = sorted({r["value_bytes"] for r in rows})
    groups = sorted({(r["test"], r["pipeline"]) for r in rows}, key=lambda g: (test_order(g[0]), g[1]))
    fig, axes = plt.subplots(len(media), len(sizes), squeeze=False, sharey=True,
                             figsize=(max(8, 1.2 * len(groups) * len(sizes)), 3.6 * len(media) + 1.2))
    width = 0.8 / len(servers)
    drawn = False
    for i, medium in enumerate(media):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            index = {(r["server"], r["test"], r["pipeline"]): float(r["rps"]) for r in rows
                     if r["medium"] == medium and r["value_bytes"] == size}
            for k, server in enumerate(servers):
                bars = [(g + (k - (len(servers) - 1) / 2) * width, value(index, server, test, pipeline))
                        for g, (test, pipeline) in enumerate(groups)]
                bars = [(x, y) for x, y in bars if y]
                if bars:
                    drawn = True
                    ax.bar([x for x, _ in bars], [y for _, y in bars], width, color=colour[server],
                           label=server)
            ax.set_yscale("log")
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels([f"{t.split(' ')[0]}\n-P {p}" for t, p in groups], fontsize=8)
            ax.set_title(f"{medium}, {size}-byte values", fontsize=10)
            if j == 0:
                ax.set_ylabel(ylabel)
            ax.grid(axis="y", which="both", alpha=0.3)
    return fig, axes, drawn


def throughput_figure(plt, doc, rows):
    servers = server_order(rows)
    colour = colours(plt, servers)
    fig, axes, _ = command_panels(plt, rows, servers, colour,
                                  lambda index, server, test, p: index.get((server, test, p)), "requests/s")
    meta = doc.get("meta", {})
    return finish(fig, axes, servers, colour,
                  "redis-benchmark -c 50: %s requests (MSET: a tenth) over %s keys per bar"
                  % (meta.get("requests", "?"), meta.get("keys", "?")))


def ratio_figure(plt, doc, rows):
    from matplotlib.ticker import FuncFormatter
    servers = [s for s in server_order(rows) if s.startswith("pmhash-")]
    if not servers:
        return None
    colour = colours(plt, server_order(rows))

    def ratio(index, server, test, pipeline):
        mine = index.get((server, test, pipeline))
        base = index.get((peer(server, test), test, pipeline))
        return mine / base if mine and base else None
    fig, axes, drawn = command_panels(plt, rows, servers, colour, ratio, "× its Redis peer")
    if not drawn:
        plt.close(fig)
        return None
    times = FuncFormatter(lambda v, _: f"{v:g}×")
    for ax in axes.flat:
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.yaxis.set_major_formatter(times)
        ax.yaxis.set_minor_formatter(times)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    return finish(fig, axes, servers, colour,
                  "Throughput over the Redis peer of the same durability (strict: appendfsync always; "
                  "epoch: everysec; GET: no persistence)")


def groups_figure(plt, doc, rows):
    """What group persistence buys: each strict configuration's throughput
    with write groups (the throughput part) over the same without them
    (the groups part), one panel per medium."""
    with_groups = {(r["medium"], r["server"], r["pipeline"], r["test"]): r["rps"]
                   for r in doc["rows"] if r["kind"] == "throughput" and r["value_bytes"] == 16}
    media = sorted({r["medium"] for r in rows})
    servers = server_order(rows)
    bars = sorted({(r["test"], r["pipeline"]) for r in rows}, key=lambda b: (test_order(b[0]), b[1]))
    fig, axes = plt.subplots(1, len(media), figsize=(5 * len(media), 4), squeeze=False)
    drawn = False
    width = 0.8 / max(len(bars), 1)
    for ax, medium in zip(axes.flat, media):
        without = {(r["server"], r["pipeline"], r["test"]): r["rps"] for r in rows if r["medium"] == medium}
        for j, (test, p) in enumerate(bars):
            xs, ys = [], []
            for i, server in enumerate(servers):
                on = with_groups.get((medium, server, p, test))
                off = without.get((server, p, test))
                if on and off:
                    xs.append(i + (j - (len(bars) - 1) / 2) * width)
                    ys.append(on / off)
            if xs:
                ax.bar(xs, ys, width, label=f"{test} -P {p}")
                drawn = True
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(servers)))
        ax.set_xticklabels([s.removeprefix("pmhash-") for s in servers], fontsize=8)
        ax.set_title(medium, fontsize=9)
        ax.set_ylabel("× without write groups")
        ax.legend(fontsize=7)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle("Group persistence: throughput with write groups over without (16-byte values)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def restart_figure(plt, doc, rows):
    media = sorted({r["medium"] for r in rows})
    servers = server_order(rows)
    colour = colours(plt, servers)
    fig, axes = plt.subplots(1, len(media), squeeze=False, sharey=True,
                             figsize=(5.5 * len(media), 4.6))
    for j, medium in enumerate(media):
        ax = axes[0][j]
        for server in servers:
            points = sorted((r["keys"], r["ready_us"] / 1000.0) for r in rows
                            if r["medium"] == medium and r["server"] == server)
            if points:
                ax.plot([p[0] for p in points], [max(p[1], 0.01) for p in points], marker="o",
                        color=colour[server], label=server)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("keys before SIGKILL")
        if j == 0:
            ax.set_ylabel("ms until PING answers")
        ax.set_title(medium, fontsize=10)
        ax.grid(which="both", alpha=0.3)
    return finish(fig, axes, servers, colour, "Restart after SIGKILL: recovery (pmhash) or "
                  "append-only file replay (Redis)")


def ycsb_figure(plt, doc, rows):
    media = sorted({r["medium"] for r in rows})
    servers = server_order(rows)
    colour = colours(plt, servers)

    def phase(r):
        return "load" if r.get("phase") == "load" else r.get("workload", "?")
    phases = sorted({phase(r) for r in rows},
                    key=lambda p: (PHASES.index(p) if p in PHASES else len(PHASES), p))
    fig, axes = plt.subplots(len(media), 1, squeeze=False, sharey=True,
                             figsize=(max(8, 1.1 * len(phases) * len(servers) / 3), 3.6 * len(media) + 1.2))
    width = 0.8 / len(servers)
    for i, medium in enumerate(media):
        ax = axes[i][0]
        index = {(r["server"], phase(r)): r["ops_per_s"] for r in rows if r["medium"] == medium}
        for k, server in enumerate(servers):
            xs, ys = [], []
            for g, p in enumerate(phases):
                if (server, p) in index:
                    xs.append(g + (k - (len(servers) - 1) / 2) * width)
                    ys.append(float(index[(server, p)]))
            ax.bar(xs, ys, width, color=colour[server], label=server)
        ax.set_xticks(range(len(phases)))
        ax.set_xticklabels([p if p == "load" else p.upper() for p in phases])
        ax.set_ylabel("operations/s")
        ax.set_title(medium, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    y = doc.get("meta", {}).get("ycsb", {})
    return finish(fig, axes, servers, colour, "YCSB through the project's Jedis binding: %s records, "
                  "%s operations per workload, %s client threads"
                  % (y.get("records", "?"), y.get("ops", "?"), y.get("threads", "?")))


def finish(fig, axes, servers, colour, title):
    from matplotlib.patches import Patch
    handles = [Patch(color=colour[s], label=s) for s in servers]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(servers), 4), fontsize=8,
               frameon=False)
    fig.suptitle(title, fontsize=10)
    rows = (len(servers) + 3) // 4
    fig.tight_layout(rect=(0, 0.05 * rows, 1, 0.95))
    return fig


FIGURES = (
    ("server_throughput.png", "throughput", throughput_figure),
    ("server_ratio.png", "throughput", ratio_figure),
    ("server_groups.png", "groups_off", groups_figure),
    ("server_restart.png", "restart", restart_figure),
    ("server_ycsb.png", "ycsb", ycsb_figure),
)


def write_figures(doc, out_dir):
    plt = import_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, kind, draw in FIGURES:
        rows = [r for r in doc["rows"] if r["kind"] == kind]
        fig = draw(plt, doc, rows) if rows else None
        if fig is None:
            print(f"plot.server: skipped {name}: no {kind} rows to draw", file=sys.stderr)
            continue
        path = out_dir / name
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
        print(path)
    return written


def main(argv):
    parser = argparse.ArgumentParser(prog="plot.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("sitting", metavar="SITTING.json")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="directory for the PNGs (default: the JSON file's folder)")
    args = parser.parse_args(argv)
    try:
        doc = read_sitting(args.sitting)
        write_figures(doc, args.out or Path(args.sitting).resolve().parent)
    except InputError as e:
        print(f"plot.server: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
