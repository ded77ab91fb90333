"""Plots pmhash-bench result files ("format": "pmhash-bench/1") as PNG figures.

    bench/plot [--out DIR] [--figures NAME,...] RESULT.json [RESULT.json ...]
    bench/plot --markdown RESULT.json [RESULT.json ...]
    bench/plot --check RESULT.json [RESULT.json ...]

The package's modules: results (reading and validating the files, selecting
runs), canvas (figure scaffolding), figures (the figure kinds of the table
runs), remote (those of the runs on memory nodes), markdown (the tables of
docs/results/README.md), and this file (the command line). Which figures
are drawn is decided by the data: each kind draws what the runs hold and is
skipped, with a note, when they hold nothing for it; --figures narrows the
choice (the profiles of bench/profiles.toml say which figures each of their
result files gets).

Set-up: scripts/bootstrap-plot.sh puts matplotlib into .venv/.  If this
script is started by another interpreter that lacks matplotlib, it re-runs
itself under .venv/bin/python.  --check needs only the standard library.

Input
-----
Each file is what one pmhash-bench invocation wrote.  Several files are
merged by concatenating their "runs"; the machine, revision and config of
every file are shown, joined with " / " where they differ.  A run's
*measured phase* is its "run" phase, or its "load" phase for workload "load".
Throughput is the phase's ops_per_s, shown in Mops/s.  Runs measured more
than once (same engine, thread count and workload, e.g. repeats merged from
several files) are averaged for throughput and their histograms summed for
the latency CDF; time series and load-factor curves use the first such run.

Figures (written into DIR, default <repo>/docs/results; each path printed)
-------
Runs of the micro workload (bench/microbench.h) are in no figure; runs on
memory nodes (bench/remote_bench.h) get the figures of remote.py
(remote_throughput, remote_ratio, remote_cost). The table runs get:
  throughput.png       grouped bars: x = workload, one bar per engine,
                       one subplot per thread count, shared y.
  scaling.png          one subplot per workload: Mops/s against threads,
                       one line per engine.  Skipped with one thread count.
  latency_cdf.png      one subplot per workload at the largest thread count:
                       CDF of latency_ns.all.histogram, log x.
  load_timeseries.png  load-phase Mops/s over time, one line per engine
                       (largest thread count, first run with a load phase);
                       each sample is drawn flat across its interval,
                       the last one ending with the phase.
  load_factor.png      load factor against keys inserted during the load,
                       one line per engine that reported a curve.
  op_latency_cdf.png   (only when --figures names it)
                       insert latency in the workload with the largest
                       insert share and read latency in the one with the
                       largest read share, largest thread count, p99 of
                       each series marked.
  OPTION.png           (figure kind "sweep") one per sweep: the runs of one
                       engine whose engine options differ in exactly one
                       option (pmhash-bench -o ENGINE.OPTION=V1,V2,...),
                       named after that option (bucket_bits.png): load and
                       run phase throughput and heap bytes per key against
                       the option's value, one line per thread count, the
                       input's other series as dashed reference lines; the
                       run phase's latency CDF per value and its p50, p99,
                       p99.9 and max, at the largest thread count.
  open_time.png        only with runs that have "reopen" (pmhash-bench
                       --reopen): open time after a clean close and after
                       a crash against keys, one line per series measured
                       at several sizes; and, with --size-property, open
                       time against the structure count each engine
                       reports in that property (log-log, one point per
                       series and key count).
  data_movement.png    only with load phases that report a property
                       "*.items_moved": items the engine's splits or
                       resizes moved per inserted key, one bar per series
                       and key count, and pool heap bytes per key after
                       the load.
--figures NAME,... (stems, e.g. throughput,open_time; "sweep" for every
sweep figure) writes only those.
Workloads are ordered load, a, b, c, d, f, txn, insert, read, read-neg,
update, delete, then every other name (the workloads an engine
contributes, "<engine>-<x>") in name order, then mixed:* in order of
appearance.  A run's series is its "series" field when it has one (a
sweep's "<engine> OPTION=VALUE"), else its engine.
The txn workload's throughput counts transactions (Mtxn/s), each of 3 reads
and 1 update; its axes and tables say so.  Runs a file lists under
"skipped" (an engine without transactions under txn) are named in the
--markdown output with their reason; figures leave them out.  Engines keep
their order of appearance and one colour in every figure; an engine found
under several durability texts becomes one series per text.  Titles give the
workload parameters; a footer gives revision and machine.

Errors and exit status
----------------------
  0  figures written (a figure without data is skipped with a note on
     stderr), or with --check: every file valid.
  1  with --check: some file invalid; one line per problem on stderr.
  2  bad input when plotting (missing file, not JSON, not a valid
     pmhash-bench/1 file), matplotlib missing, or DIR not writable:
     one line on stderr.
"""

import argparse
import sys
from pathlib import Path

# Run as `python bench/plot`: make the package importable by its name.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from plot.canvas import Canvas, import_matplotlib  # noqa: E402
from plot.figures import FIGURES, ON_REQUEST  # noqa: E402
from plot.markdown import markdown_tables  # noqa: E402
from plot.remote import write_remote_figures  # noqa: E402
from plot.results import (  # noqa: E402
    DEFAULT_OUT, InputError, Skip, is_memnode, load_results, run_check, table_docs, with_series)

REMOTE_FIGURES = ("remote_throughput", "remote_ratio", "remote_cost")


def figure_kind(name):
    """The --figures name of a FIGURES entry: its file stem, or the kind of
    a figure that writes files named by its data (sweep)."""
    return name.removesuffix(".png")


def quantize_png(path):
    """Rewrites a PNG with a 256-colour palette (Pillow comes with matplotlib)."""
    from PIL import Image
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def write_figures(docs, out_dir, only=None, size_properties=()):
    plt = import_matplotlib()
    memnode = [r for d in docs for r in d["runs"] if is_memnode(r)]
    docs = table_docs(docs)
    runs = with_series([r for d in docs for r in d["runs"]])
    out_dir.mkdir(parents=True, exist_ok=True)
    if not runs and not memnode:
        print("plot: no runs in the input; no figure written", file=sys.stderr)
        return
    if memnode:
        for path in write_remote_figures(plt, memnode, out_dir, only):
            print(path)
    if not runs:
        return
    canvas = Canvas(plt, docs, runs, size_properties)
    for name, plot in FIGURES:
        kind = figure_kind(name)
        if (only is None and kind in ON_REQUEST) or (only is not None and kind not in only):
            continue
        try:
            drawn = plot(canvas)
        except Skip as why:
            print(f"plot: skipped {name}: {why}", file=sys.stderr)
            continue
        # A kind draws one figure, or several named by their data.
        for file_name, fig in drawn if isinstance(drawn, list) else [(name, drawn)]:
            path = out_dir / file_name
            # 8-bit palette PNGs: the figures are flat colours and lines, and a
            # palette keeps each file a fraction of its RGBA size in the repository.
            fig.savefig(path, dpi=90, pil_kwargs={"optimize": True})
            quantize_png(path)
            plt.close(fig)
            print(path)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="bench/plot",
        description="Plot pmhash-bench result files (pmhash-bench/1) as PNGs.")
    parser.add_argument("files", nargs="+", metavar="RESULT.json")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"directory for the PNGs (default {DEFAULT_OUT})")
    parser.add_argument("--markdown", action="store_true",
                        help="print docs/results/README.md's tables (throughput per "
                             "workload and engine, ceilings) instead of "
                             "writing figures")
    parser.add_argument("--figures", metavar="NAME,...",
                        help="write only these figures (file stems, e.g. "
                             "throughput,open_time; sweep: every sweep figure)")
    parser.add_argument("--size-property", metavar="ENGINE.PROPERTY,...", default="",
                        help="open_time: also plot open time against this "
                             "property of each reopened store (a structure "
                             "count); each run uses the one of its engine")
    parser.add_argument("--check", action="store_true",
                        help="only validate the files; exit 0 if all are "
                             "valid, 1 with one line per problem otherwise")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.check:
        return run_check(args.files)
    try:
        docs = load_results(args.files)
        if args.markdown:
            print(markdown_tables(table_docs(docs)))
        else:
            only = None
            if args.figures:
                only = set(args.figures.split(","))
                known = {figure_kind(name) for name, _ in FIGURES} | set(REMOTE_FIGURES)
                if only - known:
                    raise InputError(f"--figures: unknown figure "
                                     f"{', '.join(sorted(only - known))} (figures: "
                                     f"{', '.join(sorted(known))})")
            sizes = [n for n in args.size_property.split(",") if n]
            write_figures(docs, args.out, only, sizes)
    except InputError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"plot: cannot write into {args.out}: {e.strerror} "
              f"({e.filename})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
