#!/usr/bin/env python3
"""Checks that no source outside an engine's own folder names an engine.

An engine is known by its descriptor (src/engine/<name>/descriptor.cc) and
listed once, by the registry (src/engine/registry.cc). Everything else -
the store, the command-line tool, the benchmarks, the public headers, the
scripts and the Makefile - asks the registry (pmhash/engines.h: the
descriptors' names, locations, capabilities and options) and never
compares against or hard-codes an engine's name.

Scanned: src/, tools/, bench/, include/, scripts/ (C++, Python and shell
sources) and the Makefile, except src/engine/<engine>/ and
src/engine/registry.cc. Not scanned: tests/, docs/ and data files (the
benchmark profiles and results). Comments are removed before the scan; an
engine's name is found in what is left - a string literal or an
identifier - as a whole word of a literal ("pmeh", "pmeh.zone_bits") or a
part of an identifier (kPmeh, pmeh_split_margin, PmehTable).

The names come from the descriptors (`.name = "..."`), so a new engine is
checked without editing this file.

Exit status 0 when no source names an engine, 1 with one line per place
(file:line: the engine and the line) when one does. There is no list of
exceptions: a front end that needs something of an engine asks the
registry, or the engine declares it in its descriptor.
--self-test plants one name of each kind in a scratch tree and fails unless
every one is reported and a comment is not.
"""

import argparse
import os
import re
import sys
import tempfile

SCANNED = ("src", "tools", "bench", "include", "scripts")
SUFFIXES = (".cc", ".h", ".hpp", ".cpp", ".py", ".sh")
NAME = re.compile(r'^\s*\.name\s*=\s*"([a-z0-9_]+)"', re.MULTILINE)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WORD = re.compile(r"[A-Za-z0-9]+")


def engine_names(root):
    """The engines of the descriptors under src/engine/."""
    names = set()
    base = os.path.join(root, "src", "engine")
    for folder in sorted(os.listdir(base)):
        path = os.path.join(base, folder, "descriptor.cc")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                names.update(NAME.findall(f.read()))
    return names


def files(root):
    """(relative path, kind) of every scanned file; kind is c or hash."""
    for top in SCANNED:
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(folder, name), root)
                parts = rel.split(os.sep)
                if parts[:2] == ["src", "engine"] and (len(parts) > 3 or parts[2] == "registry.cc"):
                    continue  # an engine's folder, or the registry
                if name.endswith((".cc", ".h", ".hpp", ".cpp")):
                    yield rel, "c"
                elif name.endswith((".py", ".sh")):
                    yield rel, "hash"
    if os.path.isfile(os.path.join(root, "Makefile")):
        yield "Makefile", "hash"


def strip_comments(text, kind):
    """The text with comments blanked (newlines kept, so lines still count).

    Each returned piece is (code, literal): string literals are kept apart
    from the code around them, so that both can be scanned their own way.
    """
    out = []  # (line, fragment, in_literal)
    line = 1
    i = 0
    n = len(text)
    quote = None
    start = 0

    def emit(end, literal):
        nonlocal start
        if end > start:
            out.append((line_of(start), text[start:end], literal))
        start = end

    newlines = [k for k, c in enumerate(text) if c == "\n"]

    def line_of(pos):
        # Binary search for the line number of a position.
        lo, hi = 0, len(newlines)
        while lo < hi:
            mid = (lo + hi) // 2
            if newlines[mid] < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo + 1

    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote or (c == "\n" and kind == "c"):
                i += 1
                emit(i, True)
                quote = None
                continue
            i += 1
            continue
        if kind == "c" and text.startswith("//", i):
            emit(i, False)
            j = text.find("\n", i)
            i = n if j < 0 else j
            start = i
            continue
        if kind == "c" and text.startswith("/*", i):
            emit(i, False)
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            start = i
            continue
        if kind == "hash" and c == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            emit(i, False)
            j = text.find("\n", i)
            i = n if j < 0 else j
            start = i
            continue
        if c in "\"'" and not (kind == "c" and c == "'" and i > 0 and text[i - 1].isalnum()):
            emit(i, False)
            quote = c
            i += 1
            continue
        i += 1
    emit(n, quote is not None)
    del line
    return out


def identifier_parts(identifier):
    """kPmehTable -> k, pmeh, table; pmeh_split_margin -> pmeh, split, margin."""
    parts = []
    for chunk in identifier.split("_"):
        parts += [p.lower() for p in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", chunk)]
    return parts


def hits_in(text, kind, names):
    """(line, engine) of every engine name outside comments."""
    found = []
    for line, fragment, literal in strip_comments(text, kind):
        offset = 0
        for piece_line, piece in enumerate(fragment.split("\n")):
            at = line + piece_line
            if literal:
                words = {w.lower() for w in WORD.findall(piece)}
            else:
                words = set()
                for ident in IDENTIFIER.findall(piece):
                    words.update(identifier_parts(ident))
            for name in sorted(names & words):
                found.append((at, name))
            offset += len(piece) + 1
    return found


def check_tree(root):
    names = engine_names(root)
    if not names:
        return [f"{root}: no engine descriptors under src/engine/*/descriptor.cc"]
    problems = []
    for rel, kind in files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.split("\n")
        seen = set()
        for line, name in hits_in(text, kind, names):
            if (line, name) in seen:
                continue
            seen.add((line, name))
            problems.append(f"{rel}:{line}: names engine '{name}': {lines[line - 1].strip()}")
    return problems


def self_test():
    """Plants one name of each kind and checks that each is reported."""
    planted = {
        "src/store/store.cc": ('if (name == "alpha") {}\n', True),
        "tools/cli/main.cc": ("constexpr int kAlphaWorkers = 1;\n", True),
        "bench/table.h": ('options.set("alpha.zone_bits", 6);\n', True),
        "include/pmhash/options.h": ("unsigned alpha_zone_bits = 6;\n", True),
        "scripts/run.sh": ('engines="beta,gamma"\n', True),
        "bench/plot.py": ('if run["engine"] == "alpha":\n', True),
        "Makefile": ("figures:\n\tplot --engine alpha\n", True),
        # Comments, other words and an engine's own folder are not hits.
        "src/heap/heap.h": ("// alpha and beta share this\nint alphabet = 1; /* beta */\n", False),
        "scripts/quiet.sh": ("echo done  # alpha\n", False),
        "src/engine/alpha/alpha.cc": ('const char* k = "alpha";\n', False),
        "src/engine/registry.cc": ('find("beta");\n', False),
    }
    with tempfile.TemporaryDirectory() as root:
        for engine in ("alpha", "beta", "gamma"):
            folder = os.path.join(root, "src", "engine", engine)
            os.makedirs(folder)
            with open(os.path.join(folder, "descriptor.cc"), "w", encoding="utf-8") as f:
                f.write(f'const EngineDescriptor kDescriptor = {{\n    .name = "{engine}",\n}};\n')
        for rel, (content, _) in planted.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
        problems = check_tree(root)
    failed = False
    for rel, (_, expected) in planted.items():
        reported = [p for p in problems if p.startswith(rel + ":")]
        if expected and not reported:
            print(f"self-test: {rel}: planted engine name not reported")
            failed = True
        if not expected and reported:
            print(f"self-test: {rel}: reported without an engine name in code: {reported}")
            failed = True
    if not any("'beta'" in p for p in problems) or not any("'gamma'" in p for p in problems):
        print("self-test: scripts/run.sh: both names of one literal should be reported")
        failed = True
    if failed:
        return 1
    print(f"self-test: {len(problems)} planted names reported, comments and engine folders passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="the repository root")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.root:
        parser.error("--root is required")
    problems = check_tree(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} place(s) name an engine; ask the registry (pmhash/engines.h) instead")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
