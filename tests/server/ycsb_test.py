#!/usr/bin/env python3
"""The YCSB binding (bench/ycsb) against pmhash-server: YCSB's workload A,
loaded and run through scripts/ycsb.sh with every read checked
(dataintegrity), and the binding's records read back byte by byte.

    tests/server/ycsb_test.py --server build/release/pmhash-server \\
        --ycsb scripts/ycsb.sh [--engine NAME]

Checks:
  - the load and the run report only operations that returned OK, as many
    as asked, and YCSB checked every read's fields against what it wrote;
  - the server then holds exactly the loaded records (DBSIZE);
  - a record the binding inserts and updates decodes, with this file's own
    decoder of the format in docs/server.md (section YCSB), to exactly the
    fields written; a record this file encodes reads back through the
    binding field by field; a value that is no record reads as an error.

Needs java and mvn (scripts/bootstrap.sh) and the binding's jars in ~/.m2
(scripts/ycsb.sh fetches them on its first build; make test builds it
before the tests). The server runs on a fresh pool under /dev/shm, on a
port the kernel chooses.
"""

import argparse
import glob
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

ARGS = None
RECORDS = 2000
OPS = 2000


class Server:
    """A pmhash-server on a fresh pool, stopped with SIGTERM."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pmhash-ycsb-", dir="/dev/shm")
        cmd = [ARGS.server, "--pool", os.path.join(self.dir, "server.pool"), "--create",
               "--size", "256M", "--port", "0", "--workers", "2"]
        if ARGS.engine:
            cmd += ["--engine", ARGS.engine]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = ""
        for line in self.proc.stdout:
            self.output += line
            m = re.search(r"ready on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                return
        raise RuntimeError("pmhash-server exited before it was ready:\n" + self.output)

    def stop(self):
        self.proc.terminate()
        rest, _ = self.proc.communicate(timeout=120)
        self.output += rest or ""
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode


class Resp:
    """Just enough of a RESP2 client: commands of byte strings, replies of
    simple strings, integers, bulk strings and arrays of them."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def close(self):
        self.sock.close()

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._reply()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError("server error: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exactly(n)
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)


def encode(fields):
    """A record in the binding's format: per field, a 4-byte big-endian
    length and the UTF-8 name, a 4-byte big-endian length and the value."""
    out = b""
    for name, value in fields:
        n = name.encode()
        out += struct.pack(">I", len(n)) + n + struct.pack(">I", len(value)) + value
    return out


def decode(value):
    """The fields of a record as (name, value) pairs in stored order;
    raises ValueError on anything that is not a record."""
    fields, at = [], 0
    while at < len(value):
        chunk = []
        for _ in range(2):
            if at + 4 > len(value):
                raise ValueError("truncated length at byte %d" % at)
            (n,) = struct.unpack_from(">I", value, at)
            at += 4
            if at + n > len(value):
                raise ValueError("length %d past the end at byte %d" % (n, at))
            chunk.append(value[at:at + n])
            at += n
        fields.append((chunk[0].decode(), chunk[1]))
    return fields


def binding_shell(port, commands):
    """Runs YCSB's command-line client with the binding on COMMANDS (one per
    line) and returns what it printed."""
    target = os.path.join(os.path.dirname(ARGS.ycsb), "..", "bench", "ycsb", "target")
    classpath = os.path.join(target, "pmhash-ycsb.jar") + ":" + os.path.join(target, "lib", "*")
    done = subprocess.run(
        ["java", "-cp", classpath, "site.ycsb.CommandLine", "-db", "site.pmhash.ycsb.PmhashClient",
         "-p", "redis.port=%d" % port],
        input="\n".join(commands) + "\nquit\n", capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError("YCSB's command line failed:\n" + done.stdout + done.stderr)
    return done.stdout


def answers(output):
    """The command-line client's answers, one list of lines per command:
    its 'Return code: X' / 'Result: X' line, then the fields it printed,
    sorted."""
    result = []
    for line in output.splitlines():
        line = line.lstrip("> ").strip()
        if line.startswith(("Return code:", "Result:", "Return result:")):
            result.append([line.split(":", 1)[1].strip()])
        elif result and "=" in line:
            result[-1].append(line)
    # The client prints a record's fields in no particular order.
    return [[a[0]] + sorted(a[1:]) for a in result]


class YcsbOnPmhashServer(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # Builds the binding if make test has not (a no-op when it has).
        subprocess.run([ARGS.ycsb, "--build-only"], check=True, timeout=900)
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, "pmhash-server exited with %d:\n%s" % (code, cls.server.output)

    def test_1_workload_a_loads_and_runs_without_a_failed_operation(self):
        rows = os.path.join(self.server.dir, "rows.json")
        done = subprocess.run(
            [ARGS.ycsb, "--port", str(self.server.port), "--workloads", "a",
             "--records", str(RECORDS), "--ops", str(OPS), "--threads", "4",
             "--rows", rows, "-p", "dataintegrity=true"],
            capture_output=True, text=True, timeout=900)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        # YCSB's own lines, not only the script's verdict: "[OP], Return=S, N".
        returns = {}
        for op, status, n in re.findall(r"^\[([A-Z-]+)\], Return=(\w+), (\d+)$", done.stdout, re.M):
            returns[(op, status)] = returns.get((op, status), 0) + int(n)
        self.assertNotRegex(done.stdout, r"-FAILED\]")
        self.assertEqual({s for _, s in returns}, {"OK"}, returns)
        self.assertEqual(returns[("INSERT", "OK")], RECORDS)
        self.assertEqual(returns[("READ", "OK")] + returns[("UPDATE", "OK")], OPS)
        # dataintegrity: YCSB compared every field it read with what it wrote.
        self.assertEqual(returns[("VERIFY", "OK")], returns[("READ", "OK")])
        with open(rows) as f:
            phases = [l for l in f if l.strip()]
        self.assertEqual(len(phases), 2, phases)

        r = Resp(self.server.port)
        try:
            self.assertEqual(r.call("DBSIZE"), RECORDS)
            # Every stored record decodes to YCSB's ten fields of 100 bytes.
            key = r.call("KEYS", "user*")[0]
            fields = decode(r.call("GET", key))
            self.assertEqual(sorted(n for n, _ in fields), ["field%d" % i for i in range(10)])
            self.assertTrue(all(len(v) == 100 for _, v in fields), fields)
        finally:
            r.close()

    def test_2_records_read_back_as_written(self):
        r = Resp(self.server.port)
        try:
            # The binding writes; this file decodes.
            out = answers(binding_shell(self.server.port, [
                "insert rb:1 f1=alpha f2=beta f3=omega",
                "update rb:1 f2=gamma f4=delta",
                "read rb:1 f1 f4",
            ]))
            self.assertEqual(out[0], ["OK"])
            self.assertEqual(out[1], ["OK"])
            self.assertEqual(out[2], ["OK", "f1=alpha", "f4=delta"])
            self.assertEqual(sorted(decode(r.call("GET", "rb:1"))),
                             [("f1", b"alpha"), ("f2", b"gamma"), ("f3", b"omega"), ("f4", b"delta")])

            # This file writes; the binding decodes.
            r.call("SET", "rb:2", encode([("name", b"pmhash"), ("empty", b""), ("size", b"x" * 300)]))
            r.call("SET", "rb:3", encode([("name", b"cut")])[:-1])  # one byte short
            out = answers(binding_shell(self.server.port, [
                "read rb:2", "read rb:3", "read rb:4", "delete rb:2", "read rb:2",
            ]))
            self.assertEqual(out[0], ["OK", "empty=", "name=pmhash", "size=" + "x" * 300])
            self.assertEqual(out[1], ["ERROR"])
            self.assertEqual(out[2], ["NOT_FOUND"])
            self.assertEqual(out[3], ["OK"])
            self.assertEqual(out[4], ["NOT_FOUND"])
            self.assertIsNone(r.call("GET", "rb:2"))
        finally:
            r.close()


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="the pmhash-server binary")
    p.add_argument("--ycsb", required=True, help="scripts/ycsb.sh")
    p.add_argument("--engine", help="the pool's engine (default: the server's)")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
