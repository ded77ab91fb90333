#!/usr/bin/env python3
"""bench/plot chooses its figures and tables by the data, never by an
engine's name: result files of an engine no build has ("zeta", with its
options and properties spelled the way pmhash-bench writes them) get the
sweep figure, data movement, open time against the structure count, and the
workload order of any engine.

    tests/plot/plot_test.py [--figures]

Without --figures only the standard library is needed (the selection of
runs and the --markdown tables); with it, the figures are drawn too
(matplotlib, from the project's .venv: scripts/bootstrap-plot.sh).
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "bench"))

from plot.figures import sweeps  # noqa: E402
from plot.results import engine_options, ordered_workloads, with_series  # noqa: E402

TEMPLATE = REPO / "docs" / "results" / "pmeh" / "open-1000000.json"
ENGINE = "zeta"  # no engine of the registry has this name


def phase_with_properties(phase, properties):
    """The phase in the current format: the engine's counters only in its
    "properties" object."""
    if phase is None:
        return None
    out = {k: v for k, v in phase.items()
           if k not in ("groups", "segments", "items_moved", "bytes_moved", "splits")}
    out["properties"] = properties
    return out


def synthetic_document(workloads=("read",), fanouts=(2, 4, 8), threads=(1, 2)):
    """A valid pmhash-bench/1 document of the invented engine: one run per
    workload, fanout and thread count, each loaded and reopened."""
    doc = json.loads(TEMPLATE.read_text())
    template = next(r for r in doc["runs"] if r.get("reopen") and r["load"])
    runs = []
    for w in workloads:
        for fanout in fanouts:
            for t in threads:
                r = copy.deepcopy(template)
                r["engine"] = ENGINE
                r["series"] = f"{ENGINE} fanout={fanout}"
                r["options"] = {f"{ENGINE}.fanout": fanout, f"{ENGINE}.seed_bits": 3}
                r["threads"] = t
                r["workload"] = w
                props = {f"{ENGINE}.items_moved": 1000 * fanout, f"{ENGINE}.nodes": 64 * fanout}
                r["load"] = phase_with_properties(r["load"], props)
                if w != "load":
                    r["run"] = copy.deepcopy(r["load"])
                for kind in ("clean", "crash"):
                    if r["reopen"][kind] is not None:
                        r["reopen"][kind] = phase_with_properties(r["reopen"][kind], props)
                runs.append(r)
    doc["runs"] = runs
    doc["config"]["engines"] = [ENGINE]
    doc["config"]["workloads"] = list(workloads)
    return doc


class SelectionTest(unittest.TestCase):
    def test_options_lose_their_engine_prefix_in_both_spellings(self):
        run = {"engine": ENGINE, "options": {"zeta.fanout": 4, "zeta_depth": 2, "other": 1}}
        self.assertEqual(engine_options(run), {"fanout": 4, "depth": 2, "other": 1})

    def test_runs_differing_in_one_option_of_an_invented_engine_are_a_sweep(self):
        runs = with_series(synthetic_document()["runs"])
        found = sweeps(runs)
        self.assertEqual([(e, o) for e, o, _ in found], [(ENGINE, "fanout")])
        self.assertEqual(len(found[0][2]), 6)

    def test_runs_differing_in_two_options_are_no_sweep(self):
        runs = with_series(synthetic_document()["runs"])
        runs[0]["options"] = {f"{ENGINE}.fanout": 2, f"{ENGINE}.seed_bits": 5}
        self.assertEqual(sweeps(runs), [])

    def test_standard_workloads_first_then_engine_workloads_by_name(self):
        present = ["zeta-g", "mixed:r50", "read", "zeta-a", "delete", "load", "a", "omega-b"]
        runs = [{"workload": w} for w in present]
        self.assertEqual(ordered_workloads(runs),
                         ["load", "a", "read", "delete", "omega-b", "zeta-a", "zeta-g",
                          "mixed:r50"])


def plot(*args):
    return subprocess.run([sys.executable, str(REPO / "bench" / "plot"), *args],
                          capture_output=True, text=True)


class MarkdownTest(unittest.TestCase):
    def test_sweep_and_movement_tables_of_an_invented_engine(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "zeta.json"
            path.write_text(json.dumps(synthetic_document(workloads=("load",))))
            done = plot("--markdown", str(path))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"{ENGINE}: runs that differ in fanout", done.stdout)
        # items moved per inserted key: 1000 * fanout over the loaded keys.
        self.assertIn("Data movement", done.stdout)


class FigureTest(unittest.TestCase):
    def test_figures_of_an_invented_engine(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "zeta.json"
            path.write_text(json.dumps(synthetic_document()))
            out = Path(tmp) / "figures"
            done = plot("--out", str(out), "--size-property", f"{ENGINE}.nodes", str(path))
            self.assertEqual(done.returncode, 0, done.stderr)
            written = sorted(p.name for p in out.iterdir())
            for name in ("fanout.png", "data_movement.png", "open_time.png", "throughput.png"):
                self.assertIn(name, written)
            done = plot("--out", str(out), "--figures", "nonsense", str(path))
            self.assertEqual(done.returncode, 2)
            self.assertIn("unknown figure nonsense", done.stderr)


if __name__ == "__main__":
    if "--figures" not in sys.argv:
        del FigureTest
    else:
        sys.argv.remove("--figures")
    unittest.main()
