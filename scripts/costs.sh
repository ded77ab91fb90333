#!/usr/bin/env bash
# The cost account of every pmhash engine (make costs): where the time of
# each operation goes, written to docs/results/costs.md.
#
#   scripts/costs.sh BUILD_DIR
#
# Shape: pmhash-bench --preset peers-8b (bench/preset.h): 8-byte keys and
# values, pools in SHM_DIR (default /dev/shm) with cache_line granularity,
# COSTS_RECORDS records (default 1000000) loaded by 2 threads, then on the
# same store as many uniform reads, negative reads, updates, inserts of new
# keys and the delete of every loaded record, 2 threads each. Engines: every
# pool engine of the registry in every durability it offers (`pmhash engines
# --modes pool`, from BUILD_DIR's pmhash).
#
# Per engine, one pmhash-bench process runs every phase under
#   perf record -e cpu-clock -k CLOCK_MONOTONIC
# The bench's JSON gives each phase's first start and last end on the same
# clock (monotonic_ns), so every sample is charged to the phase during which
# it was taken (samples between phases, such as the checks after each,
# belong to none); a phase's top 5 functions are those with the most
# samples of the whole process (every thread: workers, epoch and owner
# threads, the sampling thread) inside that window, by self time. The
# engine's own Stats give flushes and fences per operation.
#
# Hardware counters (cycles, instructions, LLC-load-misses,
# dTLB-load-misses): perf stat is asked once; when it supports them, each
# engine's whole run (all phases, the load included) is counted; when not
# (most VMs), the file says so with perf's own output lines.
#
# The machine's ceilings (pmhash-bench --limits, 2 threads, SHM_DIR) come
# first, with the non-temporal store + fence figures and the page size.
#
# Huge pages (optional): with COSTS_HUGE_DIR set to a tmpfs mounted with
# huge=advise or huge=always (as root: mkdir -p /mnt/huge && mount -t tmpfs
# -o huge=advise,size=8g none /mnt/huge), the file also gets the
# dependent-read ceiling and the read phase of every pool engine (strict) on
# SHM_DIR against COSTS_HUGE_DIR, alternating A B A B (COSTS_HUGE_ROUNDS rounds,
# default 2), medians and their ratio.
#
# Needs perf (Debian linux-perf; scripts/bootstrap.sh costs installs it) and
# python3. About 10 minutes at 1M records on a 2-core VM, most of it dali
# strict's writes.
set -euo pipefail

build=${1:?usage: scripts/costs.sh BUILD_DIR}
bin=$build/bench/pmhash-bench
records=${COSTS_RECORDS:-1000000}
shm=${SHM_DIR:-/dev/shm}
out=${COSTS_OUT:-docs/results/costs.md}
huge_dir=${COSTS_HUGE_DIR:-}
huge_rounds=${COSTS_HUGE_ROUNDS:-2}
cli=$build/pmhash

for program in "$bin" "$cli"; do
  if [ ! -x "$program" ]; then
    echo "costs: $program is missing; build it first (cmake --build --preset release --target pmhash-bench pmhash)" >&2
    exit 2
  fi
done
# The engines and durabilities to account for, from the registry.
mapfile -t engines < <("$cli" engines --modes pool)
strict_engines=$(printf '%s\n' "${engines[@]}" | grep ':strict$' | paste -sd, -)
if [ "${#engines[@]}" -eq 0 ] || [ -z "$strict_engines" ]; then
  echo "costs: $cli engines --modes pool listed no engine" >&2
  exit 2
fi
if ! command -v perf >/dev/null; then
  echo "costs: perf is missing; run scripts/bootstrap.sh costs (Debian package linux-perf)" >&2
  exit 2
fi
if [ ! -d "$shm" ]; then
  echo "costs: SHM_DIR $shm is not a directory" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pmhash-costs.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

echo "costs: ceilings" >&2
"$bin" --limits --threads 2 --pool "$shm" --json "$work/ceilings.json" >"$work/ceilings.txt"

echo "costs: hardware counters" >&2
perf stat -e cycles,instructions,LLC-load-misses,dTLB-load-misses -- true >/dev/null 2>"$work/hw-probe.txt" || true
hw=yes
if grep -q -e '<not supported>' -e '<not counted>' "$work/hw-probe.txt" ||
   ! grep -q 'cycles' "$work/hw-probe.txt"; then
  hw=no
fi

for e in "${engines[@]}"; do
  name=${e/:/-}
  cmd=("$bin" --preset peers-8b --records "$records" --engine "$e" --pool "$shm" --no-ceilings
       --json "$work/$name.json")
  echo "costs: $e" >&2
  perf record -q -e cpu-clock -k CLOCK_MONOTONIC -o "$work/$name.data" -- "${cmd[@]}" \
    >"$work/$name.txt" 2>"$work/$name.err" || {
    echo "costs: $e failed:" >&2
    cat "$work/$name.err" >&2
    exit 1
  }
  perf script -i "$work/$name.data" -F time,ip,sym,dso --ns 2>/dev/null >"$work/$name.samples"
  if [ "$hw" = yes ]; then
    perf stat -x, -e cycles,instructions,LLC-load-misses,dTLB-load-misses -o "$work/$name.hw" \
      -- "$bin" --preset peers-8b --records "$records" --engine "$e" --pool "$shm" --no-ceilings \
      >/dev/null
  fi
done

if [ -n "$huge_dir" ]; then
  for round in $(seq 1 "$huge_rounds"); do
    for side in a b; do
      dir=$shm
      [ "$side" = b ] && dir=$huge_dir
      echo "costs: huge pages, round $round, $dir" >&2
      "$bin" --limits --threads 2 --pool "$dir" --json "$work/huge-limits-$side-$round.json" >/dev/null
      "$bin" --preset peers-8b --records "$records" --engine "$strict_engines" \
        --workload read --pool "$dir" --no-ceilings --json "$work/huge-read-$side-$round.json" >/dev/null
    done
  done
fi

command_text="COSTS_RECORDS=$records SHM_DIR=$shm${huge_dir:+ COSTS_HUGE_DIR=$huge_dir} scripts/costs.sh $build"
mkdir -p "$(dirname "$out")"
python3 - "$work" "$out" "$records" "$started" "$command_text" "$hw" "$huge_dir" "$huge_rounds" \
  "${engines[@]}" <<'PY'
import collections, json, os, platform, statistics, subprocess, sys

work, out, records, started, command, hw, huge_dir, huge_rounds = sys.argv[1:9]
engines = sys.argv[9:]


def sh(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return ""


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


lines = []
ceil = load(os.path.join(work, "ceilings.json"))
machine = ceil["machine"]
revision = sh("git", "describe", "--always", "--dirty")
lines += [
    "# Cost account: where each operation's time goes",
    "",
    "Generated by `make costs` (scripts/costs.sh); do not edit by hand.",
    "",
    f"- Machine: {machine['cpu_model']}, {machine['cores']} cores, "
    f"{machine['memory_bytes'] / 2**30:.0f} GiB, {machine['os']}, kernel {machine['kernel']}",
    f"- Commit: {revision} (bench JSON: {ceil['git_revision']})",
    f"- Date: {started} (UTC)",
    f"- Command: `{command}`; per engine E: `perf record -e cpu-clock -k CLOCK_MONOTONIC -- "
    f"pmhash-bench --preset peers-8b --records {records} --engine E --pool DIR --no-ceilings --json E.json`",
    f"- Shape: peers-8b: 8-byte keys and values, {int(records):,} records loaded by 2 threads, "
    "then on the same store that many uniform reads, negative reads, updates, inserts of new keys, "
    "and the delete of every loaded record, 2 threads each; pool in /dev/shm, cache_line "
    "granularity (clwb + sfence). The machine is shared: figures are noisy, compare only "
    "within one file.",
    "",
    "## Ceilings (pmhash-bench --limits, 2 threads)",
    "",
]
for c in ceil["ceilings"]:
    lines += [
        f"Region: {c['region']}, granularity {c['granularity']}, pages {c.get('page_size', '?')}.",
        "",
        "| dependent line reads/s | independent line reads/s | 8-byte store + clwb + sfence /s "
        "| 8-byte nt store + sfence /s | 16-byte nt store + sfence /s | seq read GB/s | seq write GB/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {c['dependent_reads_per_s'] / 1e6:.2f} M | {c['independent_reads_per_s'] / 1e6:.2f} M "
        f"| {c['persists_per_s'] / 1e6:.2f} M "
        f"| {fmt(c.get('nt_persists_per_s') and c['nt_persists_per_s'] / 1e6)} M "
        f"| {fmt(c.get('nt16_persists_per_s') and c['nt16_persists_per_s'] / 1e6)} M "
        f"| {c['seq_read_bytes_per_s'] / 1e9:.2f} | {c['seq_write_bytes_per_s'] / 1e9:.2f} |",
        "",
    ]

lines += ["## Hardware counters", ""]
if hw == "no":
    probe = open(os.path.join(work, "hw-probe.txt")).read().splitlines()
    shown = [l.strip() for l in probe if "cycles" in l or "instructions" in l or "misses" in l]
    lines += [
        "Not available on this machine: `perf stat -e cycles,instructions,LLC-load-misses,"
        "dTLB-load-misses` says",
        "",
        "```",
        *shown,
        "```",
        "",
        "so the account below rests on cpu-clock samples (where the time goes, by function) and "
        "on the engines' own flush and fence counts.",
        "",
    ]
else:
    lines += [
        "perf stat over each engine's whole run (all phases, the load included):",
        "",
        "| engine | cycles | instructions | IPC | LLC-load-misses | dTLB-load-misses |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in engines:
        counts = {}
        for l in open(os.path.join(work, e.replace(":", "-") + ".hw")):
            f = l.strip().split(",")
            if len(f) > 2 and f[0].replace(".", "").isdigit():
                counts[f[2]] = float(f[0])
        cyc, ins = counts.get("cycles"), counts.get("instructions")
        ipc = ins / cyc if cyc and ins else None
        lines.append(f"| {e} | {fmt(cyc, 0)} | {fmt(ins, 0)} | {fmt(ipc)} | "
                     f"{fmt(counts.get('LLC-load-misses'), 0)} | {fmt(counts.get('dTLB-load-misses'), 0)} |")
    lines.append("")


def short(sym):
    """The symbol without its parameter lists: "f(int, char) const" -> "f() const"."""
    out, depth = [], 0
    for ch in sym:
        if ch == "(":
            if depth == 0:
                out.append("(")
            depth += 1
        elif ch == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(")")
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("pmhash::engine::", "").replace("pmhash::", "")


def samples_of(path):
    """(time in ns, function) of every sample perf script printed."""
    out = []
    for l in open(path, errors="replace"):
        head, sep, rest = l.partition(":")
        if not sep:
            continue
        try:
            t = head.strip()
            sec, _, frac = t.partition(".")
            ns = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])
        except ValueError:
            continue
        # "ADDRESS function (dso)" or "ADDRESS [unknown] (dso)"
        rest = rest.strip().partition(" ")[2]
        sym, _, dso = rest.rpartition(" (")
        sym = sym.strip() or "[unknown]"
        dso = os.path.basename(dso.rstrip(")")) if dso else "?"
        out.append((ns, f"{short(sym.split('+0x')[0])} ({dso})"))
    out.sort()
    return out


lines += [
    "## Per engine and phase",
    "",
    "Mops/s: the phase's operations over its wall time (2 threads). ns/op per thread: 2 / "
    "(Mops/s) x 1000. Flushes and fences per operation: the engine's Stats over the phase. "
    "B/key and load factor: the store after the phase. Top 5: the functions with the most "
    "cpu-clock samples (self) of the whole process during the phase, as a share of the "
    "phase's samples. Names are shortened: parameter lists and the pmhash:: and "
    "pmhash::engine:: prefixes left out.",
    "",
]
for e in engines:
    name = e.replace(":", "-")
    doc = load(os.path.join(work, name + ".json"))
    samples = samples_of(os.path.join(work, name + ".samples"))
    times = [s[0] for s in samples]
    import bisect
    lines += [f"### {e}", "",
              "| phase | Mops/s | ns/op per thread | flushes/op | fences/op | B/key | load factor |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    tops = []
    for run in doc["runs"]:
        phase = run["workload"]
        m = run["run"] if run["run"] is not None else run["load"]
        mops = m["ops_per_s"] / 1e6
        per_thread = run["threads"] / m["ops_per_s"] * 1e9 if m["ops_per_s"] else None
        lines.append(f"| {phase} | {mops:.3f} | {fmt(per_thread, 0)} | {fmt(m['flushes_per_op'])} "
                     f"| {fmt(m['fences_per_op'])} | {fmt(m['bytes_per_key'], 0)} "
                     f"| {fmt(m.get('load_factor_after'))} |")
        lo = bisect.bisect_left(times, m["monotonic_ns"]["start"])
        hi = bisect.bisect_right(times, m["monotonic_ns"]["end"])
        window = collections.Counter(s[1] for s in samples[lo:hi])
        total = hi - lo
        top = "; ".join(f"{100 * n / total:.1f}% {f}" for f, n in window.most_common(5)) if total else "no samples"
        tops.append(f"- {phase} ({total} samples): {top}")
    lines += ["", "Top 5 functions by self time:", ""] + tops + [""]

if huge_dir:
    def med(xs):
        return statistics.median(xs) if xs else None
    rounds = int(huge_rounds)
    dep = {"a": [], "b": []}
    reads = collections.defaultdict(list)  # (side, engine): read ops/s of each round
    pages = {}
    for side in "ab":
        for r in range(1, rounds + 1):
            lim = load(os.path.join(work, f"huge-limits-{side}-{r}.json"))["ceilings"][0]
            dep[side].append(lim["dependent_reads_per_s"])
            pages[side] = lim.get("page_size", "?")
            for run in load(os.path.join(work, f"huge-read-{side}-{r}.json"))["runs"]:
                if run["workload"] == "read":
                    reads[(side, run["engine"])].append(run["run"]["ops_per_s"])
    lines += [
        "## Huge pages",
        "",
        f"A: {os.environ.get('SHM_DIR', '/dev/shm')} (pages {pages['a']}); B: {huge_dir} "
        f"(pages {pages['b']}); the pool's mapping is advised MADV_HUGEPAGE in both "
        f"(media/region.h). {rounds} rounds A B A B; medians; 2 threads.",
        "",
        "| | A | B | B / A |",
        "|---|---:|---:|---:|",
    ]
    a, b = med(dep["a"]), med(dep["b"])
    lines.append(f"| dependent line reads/s (ceiling) | {a / 1e6:.2f} M | {b / 1e6:.2f} M | {b / a:.2f} |")
    for eng in dict.fromkeys(e.split(":")[0] for e in engines):
        if not reads[("a", eng)] or not reads[("b", eng)]:
            continue
        a, b = med(reads[("a", eng)]), med(reads[("b", eng)])
        lines.append(f"| {eng} read, Mops/s | {a / 1e6:.2f} | {b / 1e6:.2f} | {b / a:.2f} |")
    lines.append("")

with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"costs: wrote {out}", file=sys.stderr)
PY
