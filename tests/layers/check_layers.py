#!/usr/bin/env python3
"""Checks that pmhash's layers include each other in one direction only.

The layers, lowest first (docs/layers.md):

    base < media, sync < pool < heap, remote < engine < store < front ends

A file of a layer may include the headers of its own layer and of the
layers below it, never those of a layer above or of a sibling (heap and
remote do not know each other; neither do media and sync). Public headers
(include/pmhash/) belong to layers too: status.h, limits.h, options.h,
stats.h and transaction.h are base (plain types every layer may use),
memnode.h is remote's, store.h is the store's. So no header below src/store/
may include pmhash/store.h.

Front ends (tools/, bench/) reach the library through include/ only: no
"layer/file.h" include in their sources, and, when a compile_commands.json
is given, no -I of src/ on any of their compile lines (the library exports
include/ only; tests alone add src/).

Exit status 0 when the tree obeys, 1 with one line per violation when not.
--self-test plants one violation of each kind in a scratch tree and fails
unless every one is reported.
"""

import argparse
import json
import os
import re
import shlex
import sys
import tempfile

# What each layer may include (its own folder included).
ALLOWED = {
    "base": {"base"},
    "media": {"base", "media"},
    "sync": {"base", "sync"},
    "pool": {"base", "media", "pool"},
    "heap": {"base", "media", "sync", "pool", "heap"},
    "remote": {"base", "media", "sync", "pool", "remote"},
    "engine": {"base", "media", "sync", "pool", "heap", "remote", "engine"},
    "store": {"base", "media", "sync", "pool", "heap", "remote", "engine", "store"},
}
LAYERS = set(ALLOWED)

# The layer of each public header; one missing here is an error, so that a
# new public header is placed deliberately.
PUBLIC = {
    "status.h": "base",
    "limits.h": "base",
    "options.h": "base",
    "stats.h": "base",
    "transaction.h": "base",
    "engines.h": "base",
    "memnode.h": "remote",
    "engines.h": "engine",
    "store.h": "store",
}

# Includes that cross the layers on purpose, each with its reason.
EXCEPTIONS = {
    # Test-only switches that plant crash-consistency bugs (the crash
    # checker shows it catches each); one header of constants and one
    # atomic, shared by the engines and the memory node's verb executor.
    ("src/remote/verbs.cc", "engine/planted.h"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = (".h", ".cc")
FRONT_ENDS = ("tools", "bench")


def sources(root, top):
    base = os.path.join(root, top)
    for folder, _, files in os.walk(base):
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, root).replace(os.sep, "/")


def includes(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def layer_of_include(inc):
    """The layer an include names, or None for a file of the includer's own
    folder or another project's header."""
    head, _, rest = inc.partition("/")
    if not rest:
        return None
    if head == "pmhash":
        return PUBLIC.get(rest, "unknown public header")
    if head in LAYERS:
        return head
    return None


def check_tree(root):
    problems = []
    for name in sorted(os.listdir(os.path.join(root, "include", "pmhash"))):
        if name.endswith(".h") and name not in PUBLIC:
            problems.append(f"include/pmhash/{name}: a public header without a layer "
                            "(add it to PUBLIC in tests/layers/check_layers.py)")
    for rel in sources(root, "src"):
        layer = rel.split("/")[1]
        if layer not in LAYERS:
            problems.append(f"{rel}: folder src/{layer} is not a layer "
                            "(add it to ALLOWED in tests/layers/check_layers.py)")
            continue
        for inc in includes(root, rel):
            target = layer_of_include(inc)
            if target is None or (rel, inc) in EXCEPTIONS:
                continue
            if target not in ALLOWED[layer]:
                problems.append(f'{rel}: layer {layer} includes "{inc}" of layer {target}')
    for rel in sources(root, "include/pmhash"):
        layer = PUBLIC.get(rel.split("/")[-1])
        if layer is None:
            continue
        for inc in includes(root, rel):
            target = layer_of_include(inc)
            if target is None:
                continue
            if inc.split("/")[0] != "pmhash":
                problems.append(f'{rel}: a public header includes the internal "{inc}"')
            elif target not in ALLOWED[layer]:
                problems.append(f'{rel}: layer {layer} includes "{inc}" of layer {target}')
    for top in FRONT_ENDS:
        for rel in sources(root, top):
            for inc in includes(root, rel):
                if inc.split("/")[0] in LAYERS:
                    problems.append(f'{rel}: a front end includes the library\'s internal "{inc}" '
                                    "(give it a public header in include/pmhash/)")
    return problems


def check_compile_commands(root, path):
    """No compile line of a front end's source may see src/."""
    problems = []
    src = os.path.realpath(os.path.join(root, "src"))
    with open(path, encoding="utf-8") as f:
        commands = json.load(f)
    for entry in commands:
        file = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        rel = os.path.relpath(file, os.path.realpath(root)).replace(os.sep, "/")
        if rel.split("/")[0] not in FRONT_ENDS:
            continue
        args = entry.get("arguments") or shlex.split(entry["command"])
        dirs = []
        for i, a in enumerate(args):
            for flag in ("-I", "-isystem", "-iquote"):
                if a == flag and i + 1 < len(args):
                    dirs.append(args[i + 1])
                elif a.startswith(flag) and len(a) > len(flag):
                    dirs.append(a[len(flag):])
        for d in dirs:
            if os.path.realpath(os.path.join(entry["directory"], d)) == src:
                problems.append(f"{rel}: compiled with {d} on its include path "
                                "(only the library and tests may include src/)")
                break
    return problems


def self_test():
    """Plants one violation of each kind and checks that each is reported."""
    planted = {
        "src/heap/layout.h": '#include "pmhash/store.h"\n',
        "src/media/region.h": '#include "pool/pool.h"\n',
        "src/remote/client.h": '#include "heap/heap.h"\n',
        "src/engine/index.h": '#include "store/store_testing.h"\n',
        "include/pmhash/options.h": '#include "engine/hash.h"\n',
        "include/pmhash/stats.h": '#include "pmhash/store.h"\n',
        "tools/memnode/main.cc": '#include "remote/server.h"\n',
        "include/pmhash/extra.h": "",
        "src/extra/thing.h": "",
    }
    clean = {
        "src/base/status.cc": '#include "pmhash/status.h"\n',
        "src/store/store.cc": '#include "pmhash/store.h"\n#include "engine/index.h"\n',
        "src/heap/heap.cc": '#include "sync/rcu.h"\n#include "pmhash/limits.h"\n',
        "src/remote/verbs.cc": '#include "engine/planted.h"\n',
        "include/pmhash/store.h": '#include "pmhash/stats.h"\n',
        "bench/bench.cc": '#include "pmhash/store.h"\n#include "workload.h"\n',
    }
    expected = {
        "src/heap/layout.h", "src/media/region.h", "src/remote/client.h", "src/engine/index.h",
        "include/pmhash/options.h", "include/pmhash/stats.h", "tools/memnode/main.cc",
        "include/pmhash/extra.h", "src/extra/thing.h", "tools/cli/main.cc",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {**planted, **clean}.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        os.makedirs(os.path.join(root, "tools", "cli"))
        with open(os.path.join(root, "tools", "cli", "main.cc"), "w", encoding="utf-8") as f:
            f.write('#include "pmhash/store.h"\n')
        cc = [
            {"directory": root, "file": "tools/cli/main.cc",
             "command": f"c++ -I{root}/include -I{root}/src -c tools/cli/main.cc"},
            {"directory": root, "file": "bench/bench.cc",
             "command": f"c++ -I {root}/include -c bench/bench.cc"},
            {"directory": root, "file": "src/store/store.cc",
             "command": f"c++ -I{root}/include -I{root}/src -c src/store/store.cc"},
        ]
        cc_path = os.path.join(root, "compile_commands.json")
        with open(cc_path, "w", encoding="utf-8") as f:
            json.dump(cc, f)
        problems = check_tree(root) + check_compile_commands(root, cc_path)
    reported = {p.split(":")[0] for p in problems}
    missed = sorted(expected - reported)
    extra = sorted(reported - expected)
    for p in problems:
        print(f"  reported: {p}")
    if missed or extra:
        print(f"self-test FAILED: missed {missed}, reported clean files {extra}")
        return 1
    print(f"self-test passed: all {len(expected)} planted violations reported, nothing else")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="the repository root")
    parser.add_argument("--compile-commands", help="a build's compile_commands.json")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.root:
        parser.error("--root is required")
    problems = check_tree(args.root)
    if args.compile_commands:
        problems += check_compile_commands(args.root, args.compile_commands)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering violation(s); the layers are in docs/layers.md")
        return 1
    print("layers: every include goes down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
