#!/usr/bin/env python3
"""bench/plot/server.py draws the figures of a scripts/bench-server.sh
sitting from its JSON file: every part the sitting ran gets its figures, a
part it did not run gets none, and a file that is not a sitting is refused
with exit status 2 and one line, never a traceback.

    tests/plot/server_plot_test.py

Needs matplotlib in the project's .venv (scripts/bootstrap-plot.sh).
"""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "bench" / "plot" / "server.py"
PYTHON = REPO / ".venv" / "bin" / "python"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SERVERS = ["redis-none", "redis-everysec", "redis-always",
           "pmhash-alpha:strict", "pmhash-alpha:epoch", "pmhash-beta:strict"]


def sitting(parts):
    """A sitting's document with rows of the given parts, in the shape
    scripts/bench-server.sh writes them, for invented engines."""
    rows = []
    rate = 1000.0
    for medium in ("shm", "disk"):
        for server in SERVERS:
            rate *= 1.3
            if "throughput" in parts:
                for size in (16, 100):
                    for pipeline in (1, 16):
                        for test in ("SET", "GET", "INCR", "MSET (10 keys)"):
                            rows.append({"kind": "throughput", "medium": medium, "server": server,
                                         "value_bytes": size, "pipeline": pipeline, "test": test,
                                         "rps": rate * pipeline})
            if "groups" in parts and server.endswith(":strict"):
                for pipeline in (1, 16):
                    for test in ("SET", "MSET (10 keys)"):
                        rows.append({"kind": "groups_off", "medium": medium, "server": server,
                                     "value_bytes": 16, "pipeline": pipeline, "test": test,
                                     "rps": rate * pipeline / 2})
            if "restart" in parts and server != "redis-none":
                for keys in (1000000, 10000000):
                    rows.append({"kind": "restart", "medium": medium, "server": server, "keys": keys,
                                 "keys_after": keys, "ready_us": keys / 100.0})
            if "ycsb" in parts:
                rows.append({"kind": "ycsb", "medium": medium, "server": server, "phase": "load",
                             "workload": "a", "ops_per_s": rate, "latency_us": {}})
                for w in ("a", "b", "c", "f", "d"):
                    rows.append({"kind": "ycsb", "medium": medium, "server": server, "phase": "run",
                                 "workload": w, "ops_per_s": rate * 2, "latency_us": {}})
    return {"meta": {"requests": 1000, "keys": 100, "ycsb": {"records": 10, "ops": 10, "threads": 1}},
            "rows": rows}


def plot(doc_text, out):
    src = out / "sitting.json"
    src.write_text(doc_text)
    return subprocess.run([str(PYTHON), str(SCRIPT), str(src), "--out", str(out / "figures")],
                          capture_output=True, text=True, timeout=300)


class ServerFigures(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.out = Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def pngs(self):
        figures = self.out / "figures"
        return sorted(p.name for p in figures.glob("*.png")) if figures.exists() else []

    def test_every_part_gets_its_figures(self):
        done = plot(json.dumps(sitting({"throughput", "groups", "restart", "ycsb"})), self.out)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.pngs(), ["server_groups.png", "server_ratio.png", "server_restart.png",
                                       "server_throughput.png", "server_ycsb.png"])
        for name in self.pngs():
            data = (self.out / "figures" / name).read_bytes()
            self.assertTrue(data.startswith(PNG_MAGIC), name)
            self.assertGreater(len(data), 5000, name)
        # Every path written is printed, one per line.
        self.assertEqual(sorted(Path(l).name for l in done.stdout.split()), self.pngs())

    def test_a_part_not_run_draws_nothing(self):
        done = plot(json.dumps(sitting({"restart"})), self.out)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.pngs(), ["server_restart.png"])
        self.assertIn("skipped server_ycsb.png", done.stderr)

    def test_a_file_that_is_no_sitting_is_refused(self):
        for text in ("not json", json.dumps({"runs": []}), json.dumps({"rows": [{"kind": "x"}]}),
                     json.dumps({"rows": [{"kind": "restart", "medium": "shm"}]}),
                     json.dumps({"rows": [{"kind": "restart", "medium": "shm", "server": "s", "keys": 1}]}),
                     json.dumps({"rows": [{"kind": "ycsb", "medium": "shm", "server": "s",
                                           "ops_per_s": "fast"}]}),
                     json.dumps({"rows": [{"kind": "groups_off", "medium": "shm", "server": "s",
                                           "value_bytes": 16, "pipeline": 1, "rps": 5.0}]})):
            done = plot(text, self.out)
            self.assertEqual(done.returncode, 2, text)
            self.assertNotIn("Traceback", done.stderr, text)
            self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
            self.assertEqual(self.pngs(), [], text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
