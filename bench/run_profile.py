#!/usr/bin/env python3
"""Runs one benchmark profile of bench/profiles.toml.

    bench/run_profile.py PROFILE BUILD_DIR [pmhash-bench flags...]
    bench/run_profile.py --list
    bench/run_profile.py --check PROFILE         exit 0 if the profile exists
    bench/run_profile.py --figures [PROFILE...]  redraw the profiles' figures
                                                 (none named: every profile
                                                 whose results are committed)

scripts/bench.sh calls it (and the Makefile's bench targets call that). A
profile is data: its pmhash-bench runs (engines, workloads, records,
threads, seconds, other flags), the figures plotted from their JSON, and
where everything goes; the head of profiles.toml describes the fields.
This file only interprets them: it substitutes {NAME} (from the profile's
vars, each overridden by an environment variable of the same name, and {n}
in a step repeated over a list), runs each step, and stops at the first
that fails. Extra arguments go to every pmhash-bench run, last; a flag
they give replaces the profile's (as --preset does). An unknown profile is
an error (exit 2) that lists the profiles.

Plots run bench/plot (a package) with the interpreter of the project's .venv (made by
scripts/bootstrap-plot.sh). The kill step runs the `pmhash` tool of
BUILD_DIR: for each record count N and each engine, it loads N/2 records,
starts loading N*10 more and SIGKILLs the loader after `after` seconds,
then reads the crash recovery's result with `pmhash info --json` and checks
the pool with `pmhash check`, one CSV line each.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "bench", "profiles.toml")
VENV_PYTHON = os.path.join(".venv", "bin", "python")
PLOT = os.path.join("bench", "plot")


class ProfileError(Exception):
    pass


def load_profiles():
    with open(PROFILES, "rb") as f:
        return tomllib.load(f)


def substitute(value, names):
    """value with every {NAME} replaced; an unknown name is an error."""
    def one(m):
        key = m.group(1)
        if key not in names:
            raise ProfileError(f"{{{key}}} is not a variable of the profile")
        return str(names[key])
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", one, str(value))


def variables(profile):
    return {k: os.environ.get(k, str(v)) for k, v in profile.get("vars", {}).items()}


def without(args, given):
    """args without the flags in `given` (and the value after each)."""
    out, skip = [], False
    for a in args:
        if skip and not a.startswith("--"):
            skip = False
            continue
        skip = False
        if a.startswith("--") and a.split("=", 1)[0] in given:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def bench_args(profile, step, names, extra):
    args = [substitute(a, names) for a in profile.get("common", [])]
    for field, flag in (("engines", "--engine"), ("workloads", "--workload"),
                        ("records", "--records"), ("threads", "--threads"),
                        ("seconds", "--duration")):
        if field in step:
            args += [flag, substitute(step[field], names)]
    args += [substitute(a, names) for a in step.get("flags", [])]
    # A flag of the extra arguments replaces the profile's.
    given = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    return without(args, given) + extra


def run_bench(build, out, profile, step, names, extra):
    name = substitute(step["name"], names)
    if "say" in step:
        print(f"bench.sh: {substitute(step['say'], names)}", flush=True)
    args = [os.path.join(build, "bench", "pmhash-bench"),
            "--json", os.path.join(out, name + ".json"), "--csv", os.path.join(out, name + ".csv")]
    args += bench_args(profile, step, names, extra)
    if "stdout" not in step:
        subprocess.run(args, check=True)
        return
    # Also keep the table: the output goes to the terminal and to the file.
    with open(os.path.join(out, step["stdout"]), "w") as copy:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            copy.write(line)
        if proc.wait() != 0:
            raise subprocess.CalledProcessError(proc.returncode, args)


def run_plot(out, step, names, missing_ok=False):
    inputs = []
    for pattern in step["plot"]:
        found = sorted(glob.glob(os.path.join(out, substitute(pattern, names))))
        if not found:
            if missing_ok:
                return
            raise ProfileError(f"plot: no file matches {os.path.join(out, pattern)}")
        inputs += [f for f in found if f not in inputs]
    into = os.path.join(out, substitute(step.get("into", "."), names))
    args = [VENV_PYTHON, PLOT, "--out", os.path.normpath(into)]
    if "figures" in step:
        args += ["--figures", step["figures"]]
    args += [substitute(a, names) for a in step.get("flags", [])]
    subprocess.run(args + inputs, check=True)


def run_kill(build, out, step, names, counts):
    cli = os.path.join(build, "pmhash")
    after = float(substitute(step["after"], names))
    pool = os.path.join(substitute(step["dir"], names), f"pmhash-bench-kill-{os.getpid()}.pool")
    csv_path = os.path.join(out, step["kill"])
    rows = ["engine,records_loaded,items_after_crash,open_ns,recovery_ns,clean_shutdown"]
    load = ["--threads", "2", "--key-size", "16", "--value-size", "8"]
    for n in counts:
        n = int(n)
        for engine in substitute(step["engines"], names).split(","):
            print(f"bench.sh: kill: {engine}, {n // 2} keys loaded, SIGKILL during a further "
                  f"load", flush=True)
            size = max(n * 800, 1 << 30)
            subprocess.run([cli, "create", pool, "--engine", engine, "--size", str(size), "--force"],
                           check=True)
            subprocess.run([cli, "load", pool, *load, "--records", str(n // 2), "--seed", "1"],
                           check=True, stdout=subprocess.DEVNULL)
            # More than any engine inserts before the kill: it is still loading.
            loader = subprocess.Popen([cli, "load", pool, *load, "--records", str(n * 10),
                                       "--seed", "2"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(after)
            loader.send_signal(signal.SIGKILL)
            loader.wait()
            info = json.loads(subprocess.run([cli, "info", pool, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            subprocess.run([cli, "check", pool], check=True, stdout=subprocess.DEVNULL)
            rows.append(f"{engine},{n // 2},{info['items']},{info['open_ns']},"
                        f"{info['recovery_ns']},{str(info['clean_shutdown']).lower()}")
            os.remove(pool)
    with open(csv_path, "w") as f:
        f.write("\n".join(rows) + "\n")
    width = [max(len(r.split(",")[i]) for r in rows) for i in range(len(rows[0].split(",")))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r.split(","), width)).rstrip())


def find_profile(profiles, name):
    if name not in profiles:
        raise ProfileError(f"unknown profile '{name}' (profiles: {', '.join(profiles)})")
    return profiles[name]


def run_profile(name, build, extra):
    profile = find_profile(load_profiles(), name)
    names = variables(profile)
    out = profile["out"]
    os.makedirs(out, exist_ok=True)
    programs = [os.path.join(build, "bench", "pmhash-bench")]
    if any("plot" in s for s in profile["steps"]):
        programs.append(VENV_PYTHON)
    if any("kill" in s for s in profile["steps"]):
        programs.append(os.path.join(build, "pmhash"))
    for program in programs:
        if not os.access(program, os.X_OK):
            raise ProfileError(f"{program} is missing (make build-release; "
                               f"scripts/bootstrap-plot.sh)")
    parts = names[profile["parts"]].split() if "parts" in profile else None
    if parts is not None:
        known = {s["part"] for s in profile["steps"] if "part" in s}
        for p in parts:
            if p not in known:
                raise ProfileError(f"unknown {name} part '{p}' ({' '.join(sorted(known))})")
    ordered = [s for p in parts for s in profile["steps"] if s.get("part") == p] \
        if parts is not None else profile["steps"]
    for step in ordered:
        for pattern in step.get("clean", []):
            for f in glob.glob(os.path.join(out, pattern)):
                os.remove(f)
        counts = names[step["each"]].split() if "each" in step else [None]
        if "kill" in step:
            run_kill(build, out, step, names, counts)
            continue
        for n in counts:
            scoped = dict(names, n=n) if n is not None else names
            if "plot" in step:
                run_plot(out, step, scoped)
            else:
                run_bench(build, out, profile, step, scoped, extra)
    print(f"bench.sh: {name} profile: results in {out}/")


def redraw(names):
    """The plot steps of the profiles `names` (none: every profile marked
    `committed`), on the results they hold."""
    profiles = load_profiles()
    if not names:
        names = [n for n, p in profiles.items() if p.get("committed")]
    for name in names:
        profile = find_profile(profiles, name)
        for step in profile["steps"]:
            if "plot" in step:
                run_plot(profile["out"], step, variables(profile), missing_ok=True)


def main(argv):
    if len(argv) >= 1 and argv[0] == "--figures":
        os.chdir(ROOT)
        try:
            redraw(argv[1:])
        except ProfileError as e:
            print(f"bench.sh: {e}", file=sys.stderr)
            return 2
        except subprocess.CalledProcessError as e:
            print(f"bench.sh: {os.path.basename(e.cmd[1])} failed (exit {e.returncode})",
                  file=sys.stderr)
            return 1
        return 0
    if len(argv) == 2 and argv[0] == "--check":
        try:
            find_profile(load_profiles(), argv[1])
        except ProfileError as e:
            print(f"bench.sh: {e}", file=sys.stderr)
            return 2
        return 0
    if len(argv) >= 1 and argv[0] == "--list":
        for name, p in load_profiles().items():
            print(f"{name:8} {p.get('about', '')}")
        return 0
    if len(argv) < 2:
        names = "|".join(load_profiles())
        print(f"usage: scripts/bench.sh {names} BUILD_DIR [pmhash-bench flags...]",
              file=sys.stderr)
        return 2
    build = os.path.relpath(os.path.abspath(argv[1]), ROOT)
    os.chdir(ROOT)  # the profiles' paths are relative to the repository
    try:
        run_profile(argv[0], build, argv[2:])
    except ProfileError as e:
        print(f"bench.sh: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"bench.sh: {os.path.basename(e.cmd[0])} failed (exit {e.returncode})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
