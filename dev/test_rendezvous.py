"""The -pi tcp and -pi fs start-up rendezvous (llmc/rendezvous.h) against strays, through
build/rendezvous_tool (one rank of it alone, no MPI or NCCL; the trainer's own use is
dev/test_multi_gpu.py startup).

  tcp   rank 0 of a world of 3 on a free port, then before and between the real ranks: a
        connect-and-close, 32 bytes of garbage, a connection that says nothing (dropped after 10 s), a rank of
        another job (-pj), a rank that counts another world size, and rank 1 again once it has
        joined. Every real rank ends with rank 0's blob; each stray is dropped with a line in rank
        0's log; the ranks that were refused end non-zero with rank 0's reason.
  fs    a directory holding an earlier run's files under this job's names (an id with another
        blob, a hello of rank 1 and its ack with old nonces): rank 1 starts first and must not
        take the stale id; then rank 2, then rank 0; all end with rank 0's blob and the directory
        is empty. A rank of another job in the same directory neither disturbs them nor gets
        their blob.
Exits non-zero on any mismatch.
"""
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_diloco as dl  # noqa: E402  (report: one ok/FAIL line, counted)
from test_multi_gpu import free_port  # noqa: E402

TOOL = os.environ.get("RDV_TOOL", "build/rendezvous_tool")  # a mutant's, in dev/tests/38_rendezvous.sh
OUT = os.environ.get("RDV_OUT", "build/rendezvous")  # a mutant's own, so that runs side by side share no files
ENV = dict(os.environ, TRAIN_GPT2_TIMEOUT=os.environ.get("RDV_TIMEOUT", "20"))
report = dl.report


def start(*args):
    return subprocess.Popen([TOOL, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    m = re.search(r"blob ([0-9a-f]+)", out)
    return p.returncode, m.group(1) if m else None, out, err


def connect(port):
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("rank 0 never listened")


def tcp():
    port = free_port()
    rank0 = start("tcp", 0, 3, port, "jobA")
    connect(port).close()                                  # a port probe
    s = connect(port)
    s.sendall(os.urandom(32))                              # garbage
    s.close()
    silent = connect(port)                                 # says nothing: rank 0 moves on after 10 s
    refused = {}
    for what, args in [("another job", ("tcp", 1, 3, port, "jobB")),
                       ("another world size", ("tcp", 1, 4, port, "jobA"))]:
        refused[what] = finish(start(*args))
    rank1 = finish(start("tcp", 1, 3, port, "jobA"))
    refused["rank 1 again"] = finish(start("tcp", 1, 3, port, "jobA"))
    silent.close()
    rank2 = finish(start("tcp", 2, 3, port, "jobA"))
    rc0, blob0, out0, err0 = finish(rank0)
    got = [rank1[1], rank2[1]]
    report(rc0 == 0 and blob0 and got == [blob0, blob0] and rank1[0] == rank2[0] == 0,
           f"tcp: ranks 0, 1, 2 end with rank 0's blob ({blob0[:16] if blob0 else None}...) after the strays")
    dropped = re.findall(r"dropped a connection from [0-9.:]+: (.*)", out0)
    want = [r"sent 0 of the 24 bytes", r"not a train_gpt2 rank", r"sent 0 of the 24 bytes", r"another job",
            r"world size 4, this job's is 3", r"rank 1 has already joined"]
    ok = len(dropped) == len(want) and all(re.search(w, d) for w, d in zip(want, dropped))
    report(ok, f"tcp: rank 0 logged {len(dropped)} dropped connections (probe, garbage, silent, other job, other "
               f"world, duplicate): {dropped}" + ("" if ok else f"\n{out0}\n{err0}"))
    for what, pattern in [("another job", r"refused this rank: a rank of another job"),
                          ("another world size", r"refused this rank: world size 4"),
                          ("rank 1 again", r"refused this rank: rank 1 has already joined")]:
        rc, blob, _, err = refused[what]
        line = err.strip().splitlines()[-1] if err.strip() else ""
        report(rc != 0 and blob is None and re.search(pattern, line), f"tcp: {what}: ends non-zero without the "
                                                                        f"blob: {line[:170]}")


def stale_files(d, base, nonce, job):
    """An earlier run's files under this job's names: rank 1's hello and ack with `nonce`, and an id
    naming that nonce with another blob; returns that blob in hex."""
    hello = (0x32524754).to_bytes(4, "little") + (1).to_bytes(4, "little") + job + (1).to_bytes(4, "little") + \
        (3).to_bytes(4, "little") + nonce
    head = (0x32524754).to_bytes(4, "little") + (1).to_bytes(4, "little") + job + (3).to_bytes(4, "little")
    blob = bytes(range(128))
    open(f"{d}/{base}_id", "wb").write(head + bytes(8) + nonce + bytes(8) + blob)
    open(f"{d}/{base}_hello_1", "wb").write(hello)
    open(f"{d}/{base}_ack_1", "wb").write(hello)
    return blob.hex()


def fs():
    d = f"{OUT}/fs"
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    # this job's file names and identity, from a rank 1 that gives up after 1 s
    subprocess.run([TOOL, "fs", "1", "3", d, "jobA"], capture_output=True, env=dict(ENV, TRAIN_GPT2_TIMEOUT="1"))
    hello = [f for f in os.listdir(d) if f.endswith("_hello_1")]
    if not hello:
        report(False, f"fs: no hello file in {d}: {os.listdir(d)}")
        return
    base = hello[0][:-len("_hello_1")]
    job = open(f"{d}/{hello[0]}", "rb").read()[8:16]
    other = start("fs", 1, 2, d, "jobB")  # another job's rank in the same directory, throughout
    # order 1: rank 1 first (the stale id is there for it to take), then 2, then 0; order 2: rank 0
    # first (it reads the stale hello, writes an id for it, and must not count the stale ack), then 2, 1
    for name, order in [("rank 1 first", (1, 2, 0)), ("rank 0 first", (0, 2, 1))]:
        stale = stale_files(d, base, os.urandom(8), job)
        procs = {}
        for r in order:
            procs[r] = start("fs", r, 3, d, "jobA")
            time.sleep(0.7)
        res = {r: finish(p) for r, p in procs.items()}
        blobs = [res[r][1] for r in (0, 1, 2)]
        ok = all(res[r][0] == 0 for r in res) and blobs[0] and blobs == [blobs[0]] * 3 and stale not in blobs
        left = sorted(f for f in os.listdir(d) if f.startswith(base))
        report(ok and left == [], f"fs, {name}, an earlier run's id, hello and ack of this job in the directory: "
                                  f"ranks 0, 1, 2 end with rank 0's blob ({(blobs[0] or '')[:16]}...), not the "
                                  f"stale one; this job's files removed after (left: {left})"
               + ("" if ok else f"\n{[res[r][3][-300:] for r in res]}"))
    time.sleep(0.5)
    report(other.poll() is None, "fs: the other job's rank in the same directory is still waiting for its own rank 0")
    other.kill()
    other.communicate()


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    tcp()
    fs()
    sys.exit(1 if dl.failures else 0)
