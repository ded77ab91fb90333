#!/usr/bin/env python3
"""pmhash-server driven by redis-py, the Redis client most Python programs
use, over RESP2 and RESP3 and through twemproxy (nutcracker): every command
the server offers, with the replies and errors redis-py turns into Python
values and exceptions.

    tests/server/redis_py_test.py --server build/release/pmhash-server \\
        --cluster scripts/cluster.sh (--engine NAME | --engine all --cli build/release/pmhash)

With --engine all, the suite runs once per engine of a pool file (`pmhash
engines --names pool`), each in a process of its own.

Needs redis-py (the project's .venv: scripts/bootstrap-plot.sh). Each run
starts its own servers on fresh pools under /dev/shm, on ports the kernel
chooses, on 127.0.0.1 only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import redis

ARGS = None


class Server:
    """A pmhash-server on a fresh pool, stopped with SIGTERM."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="pmhash-redis-py-", dir="/dev/shm")
        cmd = [ARGS.server, "--pool", os.path.join(self.dir, "server.pool"), "--create",
               "--size", "256M", "--port", "0", "--workers", "2", *extra]
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
        rest, _ = self.proc.communicate(timeout=60)
        self.output += rest or ""
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode


class Commands:
    """The command suite; a subclass says how to connect."""

    protocol = 2

    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.port = cls.server.port

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, "pmhash-server exited with %d:\n%s" % (code, cls.server.output)

    def setUp(self):
        self.r = redis.Redis(host="127.0.0.1", port=self.port, protocol=self.protocol,
                             decode_responses=True, socket_timeout=30)
        self.r.flushdb()

    def tearDown(self):
        self.r.close()

    # --- connection -------------------------------------------------------

    def test_connection_commands(self):
        self.assertTrue(self.r.ping())
        self.assertEqual(self.r.echo("hi there"), "hi there")
        self.assertTrue(self.r.client_setname("suite"))
        self.assertEqual(self.r.client_getname(), "suite")
        cid = self.r.client_id()
        self.assertIsInstance(cid, int)
        mine = [c for c in self.r.client_list() if int(c["id"]) == cid]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["name"], "suite")
        # What redis-py sends on connect, and anyone may send.
        self.assertTrue(self.r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "suite-lib"))
        with self.assertRaisesRegex(redis.ResponseError, "Unrecognized option"):
            self.r.execute_command("CLIENT", "SETINFO", "COLOR", "blue")
        self.assertTrue(self.r.execute_command("SELECT", 0))
        with self.assertRaisesRegex(redis.ResponseError, "DB index is out of range"):
            self.r.execute_command("SELECT", 1)
        hello = self.r.execute_command("HELLO", self.protocol)
        hello = {k if isinstance(k, str) else k.decode(): v for k, v in
                 (hello.items() if isinstance(hello, dict) else zip(hello[::2], hello[1::2]))}
        self.assertEqual(int(hello["proto"]), self.protocol)
        with self.assertRaisesRegex(redis.ResponseError, "unknown command"):
            self.r.execute_command("NOSUCHCOMMAND", "x")
        with self.assertRaisesRegex(redis.ResponseError, "wrong number of arguments"):
            self.r.execute_command("GET")

    # --- strings ------------------------------------------------------------

    def test_get_set_and_options(self):
        r = self.r
        self.assertIsNone(r.get("k"))
        self.assertTrue(r.set("k", "v1"))
        self.assertEqual(r.get("k"), "v1")
        self.assertIsNone(r.set("k", "v2", nx=True))
        self.assertTrue(r.set("k", "v2", xx=True))
        self.assertIsNone(r.set("absent", "v", xx=True))
        self.assertEqual(r.set("k", "v3", get=True), "v2")
        self.assertIsNone(r.set("new", "v", get=True))
        self.assertTrue(r.set("t", "v", ex=100))
        self.assertEqual(r.ttl("t"), 100)
        self.assertTrue(r.set("t", "w", keepttl=True))
        self.assertGreater(r.pttl("t"), 90000)
        self.assertTrue(r.set("t", "w", px=5000))
        self.assertLessEqual(r.pttl("t"), 5000)
        self.assertTrue(r.set("t", "w", exat=int(time.time()) + 1000))
        self.assertGreater(r.ttl("t"), 900)
        self.assertTrue(r.set("t", "w", pxat=int(time.time() * 1000) + 1000000))
        self.assertGreater(r.ttl("t"), 900)
        with self.assertRaisesRegex(redis.ResponseError, "invalid expire time in 'set' command"):
            r.set("k", "v", ex=0)
        with self.assertRaisesRegex(redis.ResponseError, "syntax error"):
            r.execute_command("SET", "k", "v", "NX", "XX")
        self.assertEqual(r.setnx("k", "x"), False)
        self.assertEqual(r.setnx("fresh", "x"), True)
        self.assertTrue(r.setex("e", 50, "v"))
        self.assertEqual(r.ttl("e"), 50)
        self.assertTrue(r.psetex("e", 50000, "v"))
        self.assertEqual(r.ttl("e"), 50)
        self.assertEqual(r.getset("k", "g"), "v3")
        self.assertIsNone(r.getset("none", "g"))
        self.assertEqual(r.getdel("k"), "g")
        self.assertIsNone(r.getdel("k"))
        self.assertEqual(r.getex("e", persist=True), "v")
        self.assertEqual(r.ttl("e"), -1)
        self.assertEqual(r.getex("e", ex=30), "v")
        self.assertEqual(r.ttl("e"), 30)
        self.assertIsNone(r.getex("missing", ex=30))
        self.assertEqual(r.strlen("e"), 1)
        self.assertEqual(r.strlen("missing"), 0)
        self.assertEqual(r.append("a", "Hello"), 5)
        self.assertEqual(r.append("a", " World"), 11)
        self.assertEqual(r.get("a"), "Hello World")

    def test_binary_values_keep_every_byte(self):
        raw = redis.Redis(host="127.0.0.1", port=self.port, protocol=self.protocol)
        value = bytes(range(256)) * 100
        key = b"k\r\n\x00\xff"
        self.assertTrue(raw.set(key, value))
        self.assertEqual(raw.get(key), value)
        raw.close()

    def test_counters(self):
        r = self.r
        self.assertEqual(r.incr("n"), 1)
        self.assertEqual(r.incr("n", 41), 42)
        self.assertEqual(r.decr("n"), 41)
        self.assertEqual(r.decr("n", 11), 30)
        self.assertEqual(r.incrbyfloat("f", 1.5), 1.5)
        self.assertEqual(r.incrbyfloat("f", 0.25), 1.75)
        self.assertEqual(r.get("f"), "1.75")
        r.set("s", "text")
        with self.assertRaisesRegex(redis.ResponseError, "not an integer or out of range"):
            r.incr("s")
        with self.assertRaisesRegex(redis.ResponseError, "not a valid float"):
            r.incrbyfloat("s", 1)
        r.set("max", str(2**63 - 1))
        with self.assertRaisesRegex(redis.ResponseError, "would overflow"):
            r.incr("max")
        self.assertEqual(r.get("max"), str(2**63 - 1))

    def test_mget_mset_msetnx(self):
        r = self.r
        self.assertTrue(r.mset({"a": "1", "b": "2", "c": "3"}))
        self.assertEqual(r.mget("a", "b", "none", "c"), ["1", "2", None, "3"])
        self.assertEqual(r.msetnx({"a": "9"}), False)
        self.assertEqual(r.msetnx({"d": "4"}), True)
        try:
            ok = r.msetnx({"e": "5", "a": "9"})
        except redis.ResponseError as e:
            # Engines without transactions refuse several keys, and change
            # nothing.
            self.assertIn("needs an engine with transactions", str(e))
            self.assertEqual(r.exists("e"), 0)
        else:
            self.assertEqual(ok, False)
            self.assertEqual(r.exists("e"), 0)
            self.assertEqual(r.msetnx({"e": "5", "f": "6"}), True)
            self.assertEqual(r.mget("e", "f"), ["5", "6"])
        self.assertEqual(r.get("a"), "1")

    # --- expiry -------------------------------------------------------------

    def test_expire_family(self):
        r = self.r
        r.set("k", "v")
        self.assertEqual(r.ttl("k"), -1)
        self.assertEqual(r.ttl("none"), -2)
        self.assertEqual(r.pttl("none"), -2)
        self.assertTrue(r.expire("k", 100))
        self.assertEqual(r.ttl("k"), 100)
        self.assertFalse(r.expire("k", 50, gt=True))
        self.assertTrue(r.expire("k", 50, lt=True))
        self.assertFalse(r.expire("k", 10, nx=True))
        self.assertTrue(r.expire("k", 10, xx=True))
        self.assertTrue(r.pexpire("k", 20000))
        self.assertEqual(r.ttl("k"), 20)
        self.assertTrue(r.expireat("k", int(time.time()) + 500))
        self.assertGreater(r.ttl("k"), 490)
        self.assertTrue(r.pexpireat("k", int(time.time() * 1000) + 600000))
        self.assertGreater(r.ttl("k"), 590)
        self.assertTrue(r.persist("k"))
        self.assertFalse(r.persist("k"))
        self.assertEqual(r.ttl("k"), -1)
        self.assertFalse(r.expire("none", 10))
        with self.assertRaisesRegex(redis.ResponseError, "not compatible"):
            r.execute_command("EXPIRE", "k", "10", "NX", "XX")
        # A deadline in the past removes the key at once.
        self.assertTrue(r.expire("k", -1))
        self.assertEqual(r.exists("k"), 0)

    def test_a_key_is_gone_once_its_time_is_up(self):
        r = self.r
        self.assertTrue(r.set("short", "v", px=50))
        deadline = time.monotonic() + 20
        # The server's clock decides; poll it, with a bound.
        while r.get("short") is not None:
            self.assertLess(time.monotonic(), deadline, "the key did not expire")
            time.sleep(0.01)
        self.assertEqual(r.exists("short"), 0)
        self.assertEqual(r.ttl("short"), -2)
        self.assertEqual(r.keys("*"), [])

    # --- keys ---------------------------------------------------------------

    def test_keys_commands(self):
        r = self.r
        r.mset({"user:1": "a", "user:2": "b", "other": "c"})
        self.assertEqual(r.exists("user:1", "user:2", "none", "user:1"), 3)
        self.assertEqual(r.type("user:1"), "string")
        self.assertEqual(r.type("none"), "none")
        self.assertEqual(sorted(r.keys("user:*")), ["user:1", "user:2"])
        self.assertEqual(r.dbsize(), 3)
        self.assertEqual(r.delete("user:1", "none"), 1)
        self.assertEqual(r.unlink("user:2"), 1)
        self.assertEqual(r.dbsize(), 1)
        self.assertTrue(r.flushall())
        self.assertEqual(r.dbsize(), 0)

    def test_scan_and_randomkey(self):
        r = self.r
        self.assertIsNone(r.randomkey())
        r.mset({"user:%d" % i: str(i) for i in range(300)})
        r.mset({"item:%d" % i: str(i) for i in range(100)})
        seen = list(r.scan_iter(count=17))
        self.assertEqual(len(seen), 400)
        self.assertEqual(len(set(seen)), 400)
        users = set(r.scan_iter(match="user:*", count=50))
        self.assertEqual(users, {"user:%d" % i for i in range(300)})
        self.assertEqual(len(set(r.scan_iter(_type="string"))), 400)
        self.assertEqual(list(r.scan_iter(_type="hash")), [])
        cursor, keys = r.scan(0, count=1000)
        self.assertEqual(cursor, 0)
        self.assertEqual(len(keys), 400)
        with self.assertRaisesRegex(redis.ResponseError, "invalid cursor"):
            r.execute_command("SCAN", "nope")
        self.assertIn(r.randomkey(), set(seen))

    def test_multi_exec_watch(self):
        r = self.r
        transactions = self.server_has_transactions()
        if not transactions:
            # The whole pipelined block is refused: its SET does not run.
            with self.assertRaises(redis.ResponseError):
                r.pipeline(transaction=True).set("a", "1").execute()
            self.assertEqual(r.exists("a"), 0)
            with self.assertRaisesRegex(redis.ResponseError, "needs an engine with transactions"):
                r.execute_command("WATCH", "a")
            # Without MULTI, a pipeline works everywhere.
            self.assertEqual(r.pipeline(transaction=False).set("a", "1").incr("a").execute(), [True, 2])
            return
        self.assertEqual(r.pipeline().set("a", "1").incr("a").get("a").execute(), [True, 2, "2"])
        # WATCH: a change by another client makes EXEC run nothing.
        other = redis.Redis(host="127.0.0.1", port=self.port, protocol=self.protocol,
                            decode_responses=True, socket_timeout=30)
        with r.pipeline() as pipe:
            pipe.watch("a")
            other.set("a", "changed")
            pipe.multi()
            pipe.set("a", "mine")
            with self.assertRaises(redis.WatchError):
                pipe.execute()
        self.assertEqual(r.get("a"), "changed")
        # The usual optimistic loop (redis-py's transaction helper).
        def double(pipe):
            value = int(pipe.get("n") or 1)
            pipe.multi()
            pipe.set("n", value * 2)
        for _ in range(5):
            r.transaction(double, "n")
        self.assertEqual(r.get("n"), "32")
        # A queued command refused: nothing runs.
        with self.assertRaises(redis.ResponseError):
            r.pipeline().set("b", "1").execute_command("NOSUCHCOMMAND").execute()
        self.assertEqual(r.exists("b"), 0)
        other.close()

    def server_has_transactions(self):
        try:
            self.r.execute_command("MULTI")
        except redis.ResponseError as e:
            self.assertIn("needs an engine with transactions", str(e))
            self.assertEqual(self.r.execute_command("DISCARD"), "OK")
            return False
        self.assertEqual(self.r.execute_command("DISCARD"), "OK")
        return True

    # --- server -------------------------------------------------------------

    def test_server_commands(self):
        r = self.r
        r.set("k", "v")
        info = r.info()
        self.assertEqual(info["redis_mode"], "standalone")
        self.assertIn("pmhash_engine", info)
        self.assertEqual(info["db0"]["keys"], 1)
        self.assertIn("expired_keys", r.info("stats"))
        self.assertEqual(r.config_get("port")["port"], str(self.port))
        with self.assertRaisesRegex(redis.ResponseError, "takes its configuration at start"):
            r.config_set("maxclients", 5)
        self.assertGreater(r.command_count(), 40)
        now = r.time()
        self.assertLess(abs(now[0] - time.time()), 60)
        self.assertTrue(r.save())
        self.assertGreater(r.lastsave().timestamp() if hasattr(r.lastsave(), "timestamp") else r.lastsave(), 0)
        self.assertEqual(r.execute_command("WAIT", 0, 0), 0)


class Resp2(Commands, unittest.TestCase):
    protocol = 2


class Resp3(Commands, unittest.TestCase):
    protocol = 3


class Auth(unittest.TestCase):
    """A server with a password: nothing before AUTH."""

    def test_every_command_before_auth_is_refused(self):
        server = Server("--requirepass", "s3cret-pass")
        try:
            anon = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
            with self.assertRaises(redis.AuthenticationError):
                anon.set("k", "v")
            with self.assertRaises(redis.AuthenticationError):
                anon.get("k")
            anon.close()
            wrong = redis.Redis(host="127.0.0.1", port=server.port, password="nope")
            with self.assertRaises(redis.AuthenticationError):
                wrong.ping()
            wrong.close()
            for protocol in (2, 3):
                good = redis.Redis(host="127.0.0.1", port=server.port, password="s3cret-pass",
                                   protocol=protocol, decode_responses=True)
                self.assertTrue(good.set("k", "v"))
                self.assertEqual(good.get("k"), "v")
                good.close()
        finally:
            self.assertEqual(server.stop(), 0, server.output)


class ThroughNutcracker(unittest.TestCase):
    """Two servers behind twemproxy (scripts/cluster.sh): redis-py talks to
    the proxy as to one Redis."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pmhash-redis-py-cluster-", dir="/dev/shm")
        cmd = [ARGS.cluster, "start", "--servers", "2", "--dir", cls.dir, "--port", "0", "--size", "128M",
               "--server", ARGS.server]
        if ARGS.engine:
            cmd += ["--engine", ARGS.engine]
        # Into a file, not a pipe: the servers and the proxy it starts keep
        # their output open, and a pipe would never end.
        log_path = os.path.join(cls.dir, "start.log")
        try:
            with open(log_path, "w") as log:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=120).returncode
            assert code == 0, open(log_path).read()
        except BaseException:
            # tearDownClass does not run after a failed setUpClass: stop
            # whatever started.
            cls.tearDownClass()
            raise
        env = dict(line.split("=", 1) for line in open(os.path.join(cls.dir, "cluster.env")).read().split()
                   if "=" in line)
        cls.port = int(env["PROXY_PORT"])

    @classmethod
    def tearDownClass(cls):
        subprocess.run([ARGS.cluster, "stop", "--dir", cls.dir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_commands_through_the_proxy(self):
        # Without CLIENT SETINFO on connect, which twemproxy does not pass on
        # (it closes the connection).
        r = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=30,
                        lib_name=None, lib_version=None)
        for i in range(200):
            self.assertTrue(r.set("key:%d" % i, "value %d" % i))
        self.assertEqual(r.mget(["key:%d" % i for i in range(200)]), ["value %d" % i for i in range(200)])
        self.assertEqual(r.incr("counter"), 1)
        self.assertEqual(r.incrby("counter", 9), 10)
        self.assertEqual(r.append("key:0", "!"), len("value 0!"))
        self.assertTrue(r.expire("key:1", 100))
        self.assertEqual(r.ttl("key:1"), 100)
        self.assertEqual(r.getdel("key:2"), "value 2")
        self.assertEqual(r.exists("key:2"), 0)
        self.assertEqual(r.delete(*["key:%d" % i for i in range(200)]), 199)
        r.close()


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--cli")
    ARGS, rest = parser.parse_known_args()
    if ARGS.engine != "all":
        unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
        return
    names = subprocess.run([ARGS.cli, "engines", "--names", "pool"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert names, "pmhash engines --names pool listed no engine"
    failed = []
    for name in names:
        print("=== redis-py suite on engine %s ===" % name, flush=True)
        code = subprocess.run([sys.executable, __file__, "--server", ARGS.server, "--cluster", ARGS.cluster,
                               "--engine", name, *rest]).returncode
        if code != 0:
            failed.append(name)
    if failed:
        print("redis-py suite failed on: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
