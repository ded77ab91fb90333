#!/usr/bin/env python3
"""Plots pmhash-bench result files ("format": "pmhash-bench/1") as PNG figures.

    bench/plot.py [--out DIR] RESULT.json [RESULT.json ...]
    bench/plot.py --check RESULT.json [RESULT.json ...]

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
                       largest read share (the NEHASH paper's Figs. 11-12),
                       largest thread count, p99 of each series marked.
  bucket_bits.png      only with runs of several nehash bucket-directory
                       bits (pmhash-bench --nehash-bucket-bits): insert
                       (load phase) and search (run phase of a 100% read
                       workload) throughput and heap bytes per key against
                       b, one line per thread count; other engines in the
                       same files as dashed reference lines.
  open_time.png        only with runs that have "reopen" (pmhash-bench
                       --reopen): open time after a clean close and after
                       a crash against keys, one line per series measured
                       at several sizes; and nehash's open time against its
                       bucket groups (every run, any b), log-log.
  data_movement.png    only with load phases of pmeh or nehash: slots
                       pmeh's splits moved per inserted key, one bar per
                       series and key count, with the expected 1.44/k (k =
                       the run's pmeh_split_bits) and, at nehash, 0.72 (an
                       in-place 2-split; nehash does not count its moves)
                       marked; and pool heap bytes per key after the load.
  split_step.png       only with runs of several pmeh split steps B
                       (pmhash-bench --pmeh-split-step): insert latency CDF
                       of each B (run phase, largest thread count), and its
                       p50, p99, p99.9 and max.
  open_time's second panel shows open time against nehash's bucket groups
  and pmeh's segments (pmeh runs are labelled with k).
--figures NAME,... (stems, e.g. throughput,bucket_bits) writes only those.
Workloads are ordered load, a, b, c, d, f, txn, nehash-a, nehash-b,
nehash-g, insert, read, read-neg, update, delete, then mixed:* and any
other name in order of appearance.  A run's series is its "series" field
when it has one (a sweep's "nehash b=4"), else its engine.
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
import json
import math
import os
import sys
from pathlib import Path

FORMAT = "pmhash-bench/1"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "results"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

WORKLOAD_ORDER = ["load", "a", "b", "c", "d", "f", "txn", "nehash-a",
                  "nehash-b", "nehash-g", "insert", "read", "read-neg",
                  "update", "delete"]
# Workloads whose operations are transactions (pmhash-bench: "txn").
TXN_WORKLOADS = {"txn"}


class InputError(Exception):
    """Input cannot be used; the message is one line for stderr."""


class Skip(Exception):
    """A figure has no data; the message says why."""


# --------------------------------------------------------------------------
# Format validation.
#
# A spec is one of: a type name (INT, NUM, STR), a dict of required fields
# (extra fields are allowed, so the writer may add some), a tuple built by
# the helpers below, or a function(value, where, problems) for checks that
# go beyond types.  check() appends one "where: what" line per problem.
# --------------------------------------------------------------------------

INT, NUM, STR = "integer", "number", "string"


def nullable(spec):
    return ("nullable", spec)


def list_of(spec):
    return ("list", spec)


def pair_of(first, second):
    return ("pair", first, second)


def one_of(*values):
    return ("enum", values)


def map_of(spec, required=()):
    return ("map", spec, required)


def type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: INT, float: NUM, str: STR, list: "list",
            dict: "object"}.get(type(value), type(value).__name__)


def is_type(value, name):
    if isinstance(value, bool):
        return False
    if name == INT:
        return isinstance(value, int)
    if name == NUM:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, str)


def sub(where, key):
    """The location of field key inside where ("" is the top level)."""
    return f"{where}.{key}" if where else key


def check(value, spec, where, problems):
    """Appends to problems every way in which value does not match spec."""
    if callable(spec):
        spec(value, where, problems)
    elif isinstance(spec, dict):
        check_object(value, spec, where, problems)
    elif isinstance(spec, str):
        if not is_type(value, spec):
            problems.append(f"{where}: expected {spec}, got {type_name(value)}")
    else:
        check_composite(value, spec, where, problems)


def check_object(value, fields, where, problems):
    if not isinstance(value, dict):
        problems.append(f"{where}: expected object, got {type_name(value)}")
        return
    for key, spec in fields.items():
        if key not in value:
            problems.append(f"{where or 'top level'}: missing field \"{key}\"")
        else:
            check(value[key], spec, sub(where, key), problems)


def check_composite(value, spec, where, problems):
    kind = spec[0]
    if kind == "nullable":
        if value is not None:
            check(value, spec[1], where, problems)
    elif kind == "enum":
        if value not in spec[1]:
            allowed = ", ".join(json.dumps(v) for v in spec[1])
            problems.append(f"{where}: {json.dumps(value)} is not one of {allowed}")
    elif kind == "list":
        if not isinstance(value, list):
            problems.append(f"{where}: expected list, got {type_name(value)}")
            return
        for i, item in enumerate(value):
            check(item, spec[1], f"{where}[{i}]", problems)
    elif kind == "pair":
        if not isinstance(value, list) or len(value) != 2:
            problems.append(f"{where}: expected a [{spec[1]}, {spec[2]}] pair")
            return
        check(value[0], spec[1], f"{where}[0]", problems)
        check(value[1], spec[2], f"{where}[1]", problems)
    elif kind == "map":
        check_map(value, spec[1], spec[2], where, problems)


def check_map(value, spec, required, where, problems):
    if not isinstance(value, dict):
        problems.append(f"{where}: expected object, got {type_name(value)}")
        return
    for key in required:
        if key not in value:
            problems.append(f"{where}: missing field \"{key}\"")
    for key, item in value.items():
        check(item, spec, sub(where, key), problems)


def check_histogram(value, where, problems):
    """[[upper_bound_ns, count], ...]: bounds increasing, counts positive."""
    before = len(problems)
    check(value, list_of(pair_of(NUM, INT)), where, problems)
    if len(problems) > before:
        return
    for i in range(1, len(value)):
        if value[i][0] <= value[i - 1][0]:
            problems.append(f"{where}[{i}]: upper bound {value[i][0]} does not "
                            f"exceed the previous one ({value[i - 1][0]})")
            break
    for i, (_, count) in enumerate(value):
        if count <= 0:
            problems.append(f"{where}[{i}]: empty bucket (count {count}); "
                            f"only non-empty buckets belong in the list")
            break


LATENCY_FIELDS = {
    "count": INT, "mean": NUM, "p50": NUM, "p90": NUM, "p99": NUM,
    "p999": NUM, "max": NUM, "histogram": check_histogram,
}


def check_latency(value, where, problems):
    """LAT object; its histogram must account for exactly `count` ops."""
    before = len(problems)
    check(value, LATENCY_FIELDS, where, problems)
    if len(problems) > before:
        return
    total = sum(count for _, count in value["histogram"])
    if total != value["count"]:
        problems.append(f"{where}: histogram holds {total} ops but count "
                        f"is {value['count']}")


PHASE_FIELDS = {
    "ops": INT, "seconds": NUM, "ops_per_s": NUM,
    "ceiling_ops_per_s": nullable(NUM), "ceiling_fraction": nullable(NUM),
    "mix": {"read": NUM, "update": NUM, "insert": NUM, "delete": NUM,
            "rmw": NUM},
    "outcomes": {"ok": INT, "not_found": INT, "already_exists": INT},
    "latency_ns": map_of(check_latency, required=("all",)),
    "timeseries": {"interval_s": NUM, "ops_per_s": list_of(NUM)},
    "load_factor": list_of(pair_of(INT, NUM)),
    "flushes_per_op": nullable(NUM), "fences_per_op": nullable(NUM),
    "bytes_per_key": nullable(NUM),
    "bytes_kind": nullable(one_of("pool", "files", "dram")),
}


def check_phase(value, where, problems):
    before = len(problems)
    check(value, PHASE_FIELDS, where, problems)
    if len(problems) == before and value["timeseries"]["interval_s"] <= 0:
        problems.append(f"{where}.timeseries.interval_s: must be positive")


RUN_FIELDS = {
    "engine": STR, "kind": one_of("pmhash", "peer"), "durability": STR,
    "threads": INT, "workload": STR, "distribution": nullable(STR),
    "load": nullable(check_phase), "run": nullable(check_phase),
}


def check_run(value, where, problems):
    """A run; its measured phase must be present, "run" null iff "load"."""
    before = len(problems)
    check(value, RUN_FIELDS, where, problems)
    if len(problems) > before:
        return
    if value["threads"] < 1:
        problems.append(f"{where}.threads: must be at least 1")
    if value["workload"] == "load":
        if value["load"] is None:
            problems.append(f"{where}.load: null, but workload \"load\" "
                            f"measures the load phase")
        if value["run"] is not None:
            problems.append(f"{where}.run: must be null for workload \"load\"")
    elif value["run"] is None:
        problems.append(f"{where}.run: null, but workload "
                        f"\"{value['workload']}\" needs a run phase")


DOCUMENT_FIELDS = {
    "format": STR, "command": STR, "git_revision": STR, "started_at": STR,
    "machine": {"hostname": STR, "cpu_model": STR, "cores": INT,
                "memory_bytes": INT, "kernel": STR, "os": STR},
    "config": {"workloads": list_of(STR), "records": INT, "ops": nullable(INT),
               "duration_s": nullable(NUM), "distribution": nullable(STR),
               "zipf": NUM, "key_size": INT, "value_size": INT,
               "pool_dir": STR, "granularity": STR, "durability": STR,
               "seed": INT, "threads": list_of(INT), "engines": list_of(STR)},
    "ceilings": list_of({
        "threads": INT, "granularity": STR, "region": STR, "region_bytes": INT,
        "dependent_reads_per_s": NUM, "independent_reads_per_s": NUM,
        "persists_per_s": NUM, "seq_read_bytes_per_s": NUM,
        "seq_write_bytes_per_s": NUM}),
    "runs": list_of(check_run),
}


def validate(doc):
    """Returns the list of problems of one parsed file (empty if valid)."""
    if not isinstance(doc, dict):
        return [f"top level is {type_name(doc)}, expected an object"]
    if doc.get("format") != FORMAT:
        return [f"\"format\" is {json.dumps(doc.get('format'))}, expected "
                f"\"{FORMAT}\"; not a pmhash-bench result file"]
    problems = []
    check(doc, DOCUMENT_FIELDS, "", problems)
    return problems


def read_json(path):
    """Parses one file; raises InputError with a one-line reason (the
    caller adds the path)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError("not JSON: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not JSON: {e.msg} at line {e.lineno}, "
                         f"column {e.colno}") from None


def load_results(paths):
    """Reads and validates every file; raises InputError on the first bad one."""
    docs = []
    for path in paths:
        try:
            doc = read_json(path)
        except InputError as e:
            raise InputError(f"{path}: {e}") from None
        problems = validate(doc)
        if problems:
            more = len(problems) - 1
            tail = f" (and {more} more; list them with --check)" if more else ""
            raise InputError(f"{path}: {problems[0]}{tail}")
        docs.append(doc)
    return docs


def run_check(paths):
    """--check: one line per problem on stderr; returns the exit status."""
    status = 0
    for path in paths:
        try:
            problems = validate(read_json(path))
        except InputError as e:
            problems = [str(e)]
        for problem in problems:
            print(f"{path}: {problem}", file=sys.stderr)
        if problems:
            status = 1
        else:
            print(f"{path}: ok")
    return status


# --------------------------------------------------------------------------
# Selecting data.  `runs` is the concatenation of every file's runs.
# --------------------------------------------------------------------------

def measured(run):
    return run["load"] if run["workload"] == "load" else run["run"]


def unique(values):
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def with_series(runs):
    """Copies of runs with "series", the name one line or bar stands for:
    the engine, plus the durability mode where the input holds the same
    engine under several durability texts (so they are not averaged)."""
    texts = {}
    for r in runs:
        texts.setdefault(base_series(r), set()).add(r["durability"])
    out = []
    for r in runs:
        series = base_series(r)
        if len(texts[series]) > 1:
            series += f" [{r['durability'].split(':')[0]}]"
        out.append({**r, "series": series})
    return out


def base_series(run):
    """The run's own series name ("nehash b=4" in a bucket-bits sweep),
    else its engine (files written before runs had one)."""
    return run.get("series") or run["engine"]


def ordered_workloads(runs):
    present = unique(r["workload"] for r in runs)
    known = [w for w in WORKLOAD_ORDER if w in present]
    mixed = [w for w in present if w.startswith("mixed:")]
    other = [w for w in present if w not in known and w not in mixed]
    return known + mixed + other


def series_names(runs):
    """Series in order of their engine's first appearance, then their own."""
    engine_rank = {e: i for i, e in enumerate(unique(r["engine"] for r in runs))}
    first = {}
    for r in runs:
        first.setdefault(r["series"], (engine_rank[r["engine"]], len(first)))
    return sorted(first, key=first.get)


def thread_counts(runs):
    return sorted(set(r["threads"] for r in runs))


def mean_mops(runs):
    """Mean Mops/s of the measured phase, keyed by (series, threads, workload)."""
    sums = {}
    for r in runs:
        key = (r["series"], r["threads"], r["workload"])
        total, n = sums.get(key, (0.0, 0))
        sums[key] = (total + measured(r)["ops_per_s"] / 1e6, n + 1)
    return {key: total / n for key, (total, n) in sums.items()}


def workload_label(workload, runs):
    """The workload name, with its key distribution if it is not the same
    for every workload (config distribution null = per-workload default)."""
    dists = unique(r["distribution"] for r in runs)
    if len(dists) <= 1:
        return workload
    mine = unique(r["distribution"] for r in runs if r["workload"] == workload)
    mine = [d for d in mine if d]
    return f"{workload}\n({'/'.join(mine)})" if mine else workload


def first_load_phase(runs, series, threads, want):
    """The first run of series at threads whose load phase satisfies want."""
    for r in runs:
        if (r["series"] == series and r["threads"] == threads
                and r["load"] is not None and want(r["load"])):
            return r["load"]
    return None


# --------------------------------------------------------------------------
# Text shown on every figure.
# --------------------------------------------------------------------------

def human(n):
    """1000000 -> "1M", 250000 -> "250k", 1500 -> "1.5k"."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def joined(values):
    return " / ".join(str(v) for v in unique(values))


def distribution_text(config):
    dist = config["distribution"]
    if dist is None:
        return "per-workload distribution"
    if dist == "zipfian":
        return f"zipfian θ={config['zipf']:g}"
    return dist


def amount_text(config):
    """The run phases' length: --duration bounds them when given (ops is
    then the length of the replayed streams), else ops."""
    if config["duration_s"] is not None:
        return f"{config['duration_s']:g} s run phases"
    if config["ops"] is not None:
        return f"{human(config['ops'])} ops"
    return "ops as recorded"


def params_parts(docs):
    """Workload parameters: records, ops, distribution, sizes, granularity."""
    configs = [d["config"] for d in docs]
    return [
        f"{joined(human(c['records']) for c in configs)} records",
        joined(amount_text(c) for c in configs),
        joined(distribution_text(c) for c in configs),
        f"key {joined(c['key_size'] for c in configs)} B, "
        f"value {joined(c['value_size'] for c in configs)} B",
        f"granularity {joined(c['granularity'] for c in configs)}",
        f"durability {joined(c['durability'] for c in configs)}",
    ]


def footer_parts(docs):
    """Where the numbers come from: revision, machine, start time."""
    machines = [d["machine"] for d in docs]
    return [
        f"git {joined(d['git_revision'] for d in docs)}",
        f"{joined(m['cpu_model'] for m in machines)}, "
        f"{joined(m['cores'] for m in machines)} cores",
        f"{joined(m['hostname'] for m in machines)}",
        f"started {joined(d['started_at'] for d in docs)}",
        FORMAT,
    ]


def wrap_parts(parts, width_in, char_in):
    """Joins parts with " · " into lines of at most width_in inches, at
    char_in inches per character (a generous estimate for the font)."""
    limit = max(20, int(width_in / char_in))
    lines = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= limit:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return lines


# --------------------------------------------------------------------------
# Figure scaffolding: sizes, colours, shared legend, title and footer.
# --------------------------------------------------------------------------

def import_matplotlib():
    """Returns pyplot (Agg); re-runs under .venv/bin/python if it is missing."""
    try:
        import matplotlib
    except ImportError:
        here = Path(sys.executable).absolute()
        if VENV_PYTHON.exists() and here != VENV_PYTHON.absolute():
            os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
        raise InputError("matplotlib is not installed: run "
                         "scripts/bootstrap-plot.sh, then "
                         ".venv/bin/python bench/plot.py ...") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# What surrounds the panels, in inches: the title's first line, each line
# of parameters under it, each footer line, each legend row, and padding.
TITLE_H, PARAMS_LINE_H, FOOTER_LINE_H, LEGEND_ROW_H, LEGEND_PAD_H = \
    0.45, 0.22, 0.14, 0.2, 0.15
# Inches per character of the parameter line (11 pt) and footer (7 pt).
PARAMS_CHAR_IN, FOOTER_CHAR_IN = 0.088, 0.058
# Narrower figures cannot hold the title and legend.
MIN_FIGURE_W = 7.0


def legend_shape(width, labels):
    """(columns, rows) of a legend of labels that fits in width inches."""
    labels = list(labels)
    if not labels:
        return 1, 0
    longest = max(len(s) for s in labels)
    cols = max(1, min(len(labels), int(width / (0.06 * longest + 0.7))))
    return cols, math.ceil(len(labels) / cols)


class Canvas:
    """Builds figures with consistent engine colours, legend and footer."""

    def __init__(self, plt, docs, runs):
        self.plt = plt
        self.docs = docs
        self.runs = runs
        self.series = series_names(runs)
        palette = plt.get_cmap("tab10" if len(self.series) <= 10 else "tab20")
        self.colour = {e: palette(i % palette.N)
                       for i, e in enumerate(self.series)}
        self.label = {}
        for r in runs:
            self.label.setdefault(r["series"],
                                  f"{r['series']} ({r['kind']}) — {r['durability']}")

    def wrapped(self, width):
        """(parameter lines, footer lines) for a figure width inches wide."""
        return (wrap_parts(params_parts(self.docs), width, PARAMS_CHAR_IN),
                wrap_parts(footer_parts(self.docs), width, FOOTER_CHAR_IN))

    def grid(self, n, panel_w, panel_h, sharey=False, max_w=24.0, cols=None):
        """A figure with n panels, cols per row (default: as many as fit in
        max_w inches)."""
        if cols is None:
            cols = max(1, min(n, int(max_w // panel_w)))
        rows = math.ceil(n / cols)
        width = max(MIN_FIGURE_W, panel_w * cols)
        params, footer = self.wrapped(width)
        _, legend_rows = legend_shape(width, self.label.values())
        extra = (TITLE_H + PARAMS_LINE_H * len(params)
                 + FOOTER_LINE_H * len(footer) + LEGEND_PAD_H
                 + LEGEND_ROW_H * legend_rows)
        fig, axes = self.plt.subplots(
            rows, cols, figsize=(width, panel_h * rows + extra),
            sharey=sharey, squeeze=False, layout="constrained")
        flat = list(axes.flat)
        for ax in flat[n:]:
            ax.set_visible(False)
        return fig, flat[:n]

    def finish(self, fig, title, shown):
        """Adds the title, the engine legend below the panels, and footer.

        The bottom of the figure is reserved in inches (footer line, then
        legend rows) and the constrained layout gets the rest."""
        params, footer = self.wrapped(fig.get_figwidth())
        fig.suptitle("\n".join([title, *params]), fontsize=11)
        handles = [self.plt.Line2D([], [], color=self.colour[e], lw=6)
                   for e in shown]
        labels = [self.label[e] for e in shown]
        cols, rows = legend_shape(fig.get_figwidth(), labels)
        height = fig.get_figheight()
        footer_h = (FOOTER_LINE_H * len(footer) + 0.08) / height
        legend_h = (LEGEND_ROW_H * rows + LEGEND_PAD_H) / height
        if labels:
            fig.legend(handles, labels, loc="lower center", ncols=cols,
                       bbox_to_anchor=(0.5, footer_h), fontsize=8,
                       frameon=False, borderaxespad=0.2)
        fig.get_layout_engine().set(rect=(0, footer_h + legend_h, 1,
                                          1 - footer_h - legend_h))
        fig.text(0.005, 0.04 / height, "\n".join(footer), fontsize=7,
                 color="0.35", ha="left", va="bottom")
        return fig


def rotate_if_crowded(ax, labels, limit=6):
    longest = max(len(line) for s in labels for line in s.split("\n"))
    if len(labels) > limit or longest > 12:
        ax.tick_params(axis="x", labelrotation=30)
        for text in ax.get_xticklabels():
            text.set_horizontalalignment("right")
            text.set_rotation_mode("anchor")


def thread_word(n):
    return f"{n} thread" + ("" if n == 1 else "s")


# --------------------------------------------------------------------------
# The figures.  Each returns a finished Figure or raises Skip.
# --------------------------------------------------------------------------

def bar_panel_layout(panels, groups, bars_per_group, max_w=24.0):
    """(panel width, columns) for grouped-bar panels: side by side at a
    comfortable width, else side by side squeezed, else one per row."""
    comfortable = min(12.0, max(4.5, 1.0 + groups * (0.3 + 0.12 * bars_per_group)))
    if panels * comfortable <= max_w:
        return comfortable, panels
    tightest = 1.0 + groups * (0.15 + 0.07 * bars_per_group)
    if panels * tightest <= max_w:
        return max_w / panels, panels
    return comfortable, 1


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


def prop(measure, engine, counter):
    """The engine's property "<engine>.<counter>" of a phase or an open, or
    None. Results written before properties had their own object keep the
    counter as a field of its own, under the same name."""
    properties = measure.get("properties")
    if properties is None:
        return measure.get(counter)
    return properties.get(f"{engine}.{counter}")


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


def quantize_png(path):
    """Rewrites a PNG with a 256-colour palette (Pillow comes with matplotlib)."""
    from PIL import Image
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def write_figures(docs, out_dir, only=None):
    plt = import_matplotlib()
    runs = with_series([r for d in docs for r in d["runs"]])
    out_dir.mkdir(parents=True, exist_ok=True)
    if not runs:
        print("plot: no runs in the input; no figure written", file=sys.stderr)
        return
    canvas = Canvas(plt, docs, runs)
    for name, plot in FIGURES:
        stem = name.removesuffix(".png")
        if (only is None and stem in ON_REQUEST) or (only is not None and stem not in only):
            continue
        try:
            fig = plot(canvas)
        except Skip as why:
            print(f"plot: skipped {name}: {why}", file=sys.stderr)
            continue
        path = out_dir / name
        # 8-bit palette PNGs: the figures are flat colours and lines, and a
        # palette keeps each file a fraction of its RGBA size in the repository.
        fig.savefig(path, dpi=90, pil_kwargs={"optimize": True})
        quantize_png(path)
        plt.close(fig)
        print(path)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="bench/plot.py",
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
                             "throughput,bucket_bits)")
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
            print(markdown_tables(docs))
        else:
            only = None
            if args.figures:
                only = set(args.figures.split(","))
                known = {name.removesuffix(".png") for name, _ in FIGURES}
                if only - known:
                    raise InputError(f"--figures: unknown figure "
                                     f"{', '.join(sorted(only - known))} (figures: "
                                     f"{', '.join(sorted(known))})")
            write_figures(docs, args.out, only)
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
