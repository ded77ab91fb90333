#!/usr/bin/env python3
"""Writes the seed inputs of the wire fuzzers (memnode_request_fuzzer.cc and
tcp_reply_fuzzer.cc; their headers describe the input formats) into
tests/fuzz/corpus-memnode-request/ and tests/fuzz/corpus-tcp-reply/.
Run it again after changing a format; the files are committed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REQUEST_MAGIC = 0x51524D50   # "PMRQ"
RESPONSE_MAGIC = 0x53524D50  # "PMRS"
CLIENT_HELLO_MAGIC = 0x48434D50  # "PMCH"
PROTOCOL = 2
READ, WRITE, CAS, FAA = 0, 1, 2, 3
FIRST_ALLOCATABLE = 16384
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
MAX_BODY = 64 * MIB


def header(magic, body, tag, count):
    return struct.pack("<IIQII", magic, body, tag, count, 0)


def op(verb, length, off, arg0=0, arg1=0):
    return struct.pack("<B3xIQQQ", verb, length, off, arg0, arg1)


def request(tag, ops):
    """ops: (verb, len, off, arg0, arg1, payload) tuples."""
    body = b"".join(op(v, n, o, a0, a1) + p for v, n, o, a0, a1, p in ops)
    return header(REQUEST_MAGIC, len(body), tag, len(ops)) + body


def reads(tag, count, length, off=FIRST_ALLOCATABLE):
    return request(tag, [(READ, length, off, 0, 0, b"")] * count)


def client_hello():
    return struct.pack("<IIII", CLIENT_HELLO_MAGIC, PROTOCOL, 0, 0) + bytes(64)


def write_seeds(folder, seeds):
    path = os.path.join(HERE, folder)
    os.makedirs(path, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)


def request_seeds():
    every_verb = request(1, [
        (WRITE, 16, FIRST_ALLOCATABLE, 0, 0, b"sixteen bytes..."),
        (READ, 16, FIRST_ALLOCATABLE, 0, 0, b""),
        (CAS, 8, FIRST_ALLOCATABLE, 0x2e2e2e7365747962, 7, b""),
        (FAA, 8, FIRST_ALLOCATABLE + 8, 5, 0, b""),
        (READ, 64, 4096, 0, 0, b""),
        (READ, 0, FIRST_ALLOCATABLE, 0, 0, b""),
    ])
    auto = bytes([0, 16])  # the harness sends the ClientHello; 64 KiB pieces
    seeds = {
        # The requests that overflowed: 65 READs of 64 MiB - 16 KiB (a 2,080-byte
        # body) for a 64 MiB node (the fuzz node's size), 5 of 1 GiB -
        # 16 KiB (160 bytes) for a 1 GiB node: their lengths sum past 2^32.
        "overflow-65-reads-64mib": auto + reads(1, 65, 64 * MIB - 16 * KIB),
        "overflow-5-reads-1gib": auto + reads(1, 5, GIB - 16 * KIB),
        # Sums just under and just over the response bound, in range.
        "reads-summing-to-the-bound": auto + reads(1, 2, 32 * MIB),
        "reads-summing-past-the-bound": auto + reads(1, 2, 32 * MIB + 8),
        "every-verb": auto + every_verb,
        "every-verb-byte-by-byte": bytes([0, 0]) + every_verb,
        "pipelined": auto + reads(1, 1, 8) + every_verb + reads(3, 2, 4096),
        "read-of-the-header": auto + reads(1, 1, 8, off=0),
        "write-past-the-end": auto + request(1, [(WRITE, 16, 64 * MIB - 8, 0, 0, b"x" * 16)]),
        "misaligned-cas": auto + request(1, [(CAS, 8, FIRST_ALLOCATABLE + 3, 0, 1, b"")]),
        "bad-magic": auto + header(0x12345678, 0, 1, 0),
        "body-over-max": auto + header(REQUEST_MAGIC, MAX_BODY + 1, 1, 1),
        "count-disagrees": auto + header(REQUEST_MAGIC, 32, 1, 2) + op(READ, 8, FIRST_ALLOCATABLE),
        "unknown-verb": auto + header(REQUEST_MAGIC, 32, 1, 1) + op(9, 8, FIRST_ALLOCATABLE),
        "half-sent-64mib-write": auto + header(REQUEST_MAGIC, MAX_BODY, 1, 1)
                                 + op(WRITE, MAX_BODY - 32, FIRST_ALLOCATABLE) + b"x" * 4096,
        "raw-bootstrap": bytes([1, 16]) + client_hello() + every_verb,
        "raw-request-first": bytes([1, 16]) + every_verb,
        "old-protocol-hello": bytes([1, 16]) + struct.pack("<IIII", CLIENT_HELLO_MAGIC, 1, 0, 0) + bytes(64),
        "secret-node-no-proof": bytes([3, 16]) + client_hello() + every_verb,
        "secret-node-wrong-proof": bytes([3, 16]) + struct.pack("<IIII", CLIENT_HELLO_MAGIC, PROTOCOL, 1, 0)
                                   + bytes(32) + b"p" * 32,
    }
    write_seeds("corpus-memnode-request", seeds)


def reply_seeds():
    def response(tag, body, status=0):
        return header(RESPONSE_MAGIC, len(body), tag, status) + body

    ok = {0: b"r" * 8, 1: b"r" * 100 + struct.pack("<Q", 3), 2: struct.pack("<Q", 9) + b"r" * 4096, 3: b""}
    seeds = {}
    for shape in range(4):
        seeds["ok-shape-%d" % shape] = bytes([shape << 2, 12]) + response(100, ok[shape])
    # Four batches of shapes 0, 1, 2, 3 answered in order, in 1-byte reads.
    mode = 3 | (0 << 2) | (1 << 4) | (2 << 6)
    all4 = b"".join(response(100 + i, ok[i]) for i in range(3))
    seeds["four-in-order"] = bytes([mode, 12]) + all4 + response(103, ok[0])
    seeds["four-byte-by-byte"] = bytes([mode, 0]) + all4
    seeds["error-response"] = bytes([0, 12]) + response(100, b"memory node x: verb 0 outside", 2)
    seeds["error-text-too-long"] = bytes([0, 12]) + header(RESPONSE_MAGIC, 8192, 100, 2)
    seeds["another-tag"] = bytes([0, 12]) + response(7, ok[0])
    seeds["wrong-length"] = bytes([0, 12]) + response(100, b"r" * 9)
    seeds["body-over-max"] = bytes([0, 12]) + header(RESPONSE_MAGIC, MAX_BODY + 1, 100, 0)
    seeds["truncated"] = bytes([1 << 2, 12]) + response(100, ok[1])[:-20]
    seeds["response-with-nothing-pending"] = bytes([0, 12]) + response(100, ok[0]) + response(101, ok[0])
    write_seeds("corpus-tcp-reply", seeds)


if __name__ == "__main__":
    request_seeds()
    reply_seeds()
