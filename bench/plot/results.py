"""Reading pmhash-bench/1 files: validation (the schema of bench/report.h,
bench/microbench.h and bench/remote_bench.h) and the helpers that select
runs, series, workloads and thread counts."""

import json
import math
import sys
from pathlib import Path


FORMAT = "pmhash-bench/1"
REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_OUT = REPO / "docs" / "results"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

# The workloads every table runs (YCSB's, the transaction mix and the
# single-operation ones), in the order figures and tables show them; the
# workloads an engine contributes ("<engine>-<x>") come after them, in name
# order (ordered_workloads).
STANDARD_WORKLOADS = ["load", "a", "b", "c", "d", "f", "txn", "insert", "read",
                      "read-neg", "update", "delete"]
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


# The micro workload's runs (bench/microbench.h): five phases on one table.
MICRO_PHASE_FIELDS = {"name": STR, "ops": INT, "seconds": NUM, "ops_per_s": NUM,
                      "flushes_per_op": nullable(NUM), "fences_per_op": nullable(NUM)}
MICRO_RUN_FIELDS = {
    "engine": STR, "kind": one_of("pmhash", "peer"), "threads": INT, "workload": STR,
    "repetition": INT, "phases": list_of(MICRO_PHASE_FIELDS),
}

# The runs of the engines on memory nodes (bench/remote_bench.h).
MEMNODE_PHASE_FIELDS = {"ops": INT, "seconds": NUM, "ops_per_s": NUM,
                        "round_trips_per_op": nullable(NUM), "bytes_per_op": nullable(NUM)}
MEMNODE_RUN_FIELDS = {
    "engine": STR, "kind": one_of("memnode"), "threads": INT, "clients": INT,
    "transport": STR, "latency_ns": INT, "workload": STR,
    "load": nullable(MEMNODE_PHASE_FIELDS), "run": nullable(MEMNODE_PHASE_FIELDS),
}


def engine_options(run):
    """The run's engine options by their name within the engine
    ("bucket_bits"), or {} (a peer). The files spell an option with the
    engine's name and a dot ("<engine>.x") or, written earlier, an
    underscore ("<engine>_x"); both lose that prefix here."""
    out = {}
    engine = run["engine"]
    for key, value in (run.get("options") or {}).items():
        for prefix in (engine + ".", engine + "_"):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        out[key] = value
    return out


def properties_ending(measure, engine, counter):
    """{name: value} of the engine's properties of a phase or an open whose
    name ends in ".<counter>"; in results written before properties had
    their own object, the field <counter> under the name "<engine>.<counter>"."""
    properties = measure.get("properties")
    if properties is None:
        value = measure.get(counter)
        return {} if value is None else {f"{engine}.{counter}": value}
    return {k: v for k, v in properties.items() if k.endswith("." + counter)}


def prop(measure, engine, counter):
    """The engine's property "<engine>.<counter>" of a phase or an open, or
    None. Results written before properties had their own object keep the
    counter as a field of its own, under the same name."""
    properties = measure.get("properties")
    if properties is None:
        return measure.get(counter)
    return properties.get(f"{engine}.{counter}")


def is_micro(run):
    return isinstance(run, dict) and "phases" in run


def is_memnode(run):
    return isinstance(run, dict) and run.get("kind") == "memnode"


def check_any_run(value, where, problems):
    """A run of the table driver, of the micro workload or on memory nodes."""
    if is_memnode(value):
        before = len(problems)
        check(value, MEMNODE_RUN_FIELDS, where, problems)
        if len(problems) == before and (value["load"] is None) == (value["run"] is None):
            problems.append(f"{where}: exactly one of load and run must be a phase")
    elif is_micro(value):
        check(value, MICRO_RUN_FIELDS, where, problems)
    else:
        check_run(value, where, problems)


# Every file's config has these; a table driver's file (not the micro
# workload's, not memory nodes') has TABLE_CONFIG_FIELDS too.
CONFIG_FIELDS = {"workloads": list_of(STR), "records": INT, "key_size": INT,
                 "value_size": INT, "seed": INT, "threads": list_of(INT),
                 "engines": list_of(STR)}
TABLE_CONFIG_FIELDS = {**CONFIG_FIELDS, "ops": nullable(INT), "duration_s": nullable(NUM),
                       "distribution": nullable(STR), "zipf": NUM, "pool_dir": STR,
                       "granularity": STR, "durability": STR}


def check_config(value, where, problems):
    table = not (isinstance(value, dict) and
                 ("transports" in value or value.get("workloads") == ["micro"]))
    check(value, TABLE_CONFIG_FIELDS if table else CONFIG_FIELDS, where, problems)


DOCUMENT_FIELDS = {
    "format": STR, "command": STR, "git_revision": STR, "started_at": STR,
    "machine": {"hostname": STR, "cpu_model": STR, "cores": INT,
                "memory_bytes": INT, "kernel": STR, "os": STR},
    "config": check_config,
    "ceilings": list_of({
        "threads": INT, "granularity": STR, "region": STR, "region_bytes": INT,
        "dependent_reads_per_s": NUM, "independent_reads_per_s": NUM,
        "persists_per_s": NUM, "seq_read_bytes_per_s": NUM,
        "seq_write_bytes_per_s": NUM}),
    "runs": list_of(check_any_run),
}


def table_docs(docs):
    """The documents with only the table driver's runs (the ones the figures
    of figures.py and the --markdown tables read)."""
    return [{**d, "runs": [r for r in d["runs"] if not is_micro(r) and not is_memnode(r)]}
            for d in docs]


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
    """The run's own series name (the engine and the swept option's value
    in a sweep: "<engine> bits=4"), else its engine (files written before
    runs had one)."""
    return run.get("series") or run["engine"]


def ordered_workloads(runs):
    """The standard workloads in their order, then every other name (the
    workloads engines contribute, "<engine>-<x>") in name order, then the
    mixed:* ones in order of appearance."""
    present = unique(r["workload"] for r in runs)
    known = [w for w in STANDARD_WORKLOADS if w in present]
    mixed = [w for w in present if w.startswith("mixed:")]
    other = sorted(w for w in present if w not in known and w not in mixed)
    return known + other + mixed


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
