#!/usr/bin/env python3
# Remote protection on real verbs, run by test/rxe/guest.sh in both
# guests.  Guest 1 keeps an engine (T) that exports one region and holds
# a private one beside it, and a second process (S) with its own region.
# Guest 0 opens T, then believes ("forge") that T's exported region starts
# at the private region or at S's region, so kvt's own range check lets
# the request through and only the NIC's key check stands in the way.
# Each such request must fail with EACCES, leave the bytes alone, and the
# peer must still work afterwards.  Then T unregisters a third region
# while guest 0 streams writes into it: none may land after the
# unregister returned (the NIC's key is gone).
#
#   protect.py target|initiator BUILD SHARED IP PEER_IP
# Prints [PASS] rxe::protect_* / [FAIL] rxe::protect_*: why.
import os
import subprocess
import sys
import time

EACCES = 13
ERANGE = 34
LEN = 1 << 20
PORT = 7473
OPTS = ["--kvt-pmd", "rdma", "--kvt-idle", "sleep:50", "--kvt-timeout",
        "10000"]


class Peer:
    """A kvt-testpeer process driven line by line."""

    def __init__(self, build, listen):
        # KVT_TESTPEER: another peer binary (the verbs double's, for a
        # dry run of this script without guests).
        binary = os.environ.get("KVT_TESTPEER",
                                os.path.join(build, "test", "kvt-testpeer"))
        self.p = subprocess.Popen(
            [binary, "--", *OPTS,
             "--kvt-listen", listen],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError("testpeer did not start: %s" % line)
        self.addr = line[1]

    def send(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def reply(self, text):
        rep = self.p.stdout.readline().strip()
        if not rep.startswith("ok"):
            raise RuntimeError("%s -> %s" % (text, rep))
        return rep[3:]

    def cmd(self, text):
        self.send(text)
        return self.reply(text)

    def stop(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
            self.p.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


def await_file(path, seconds):
    end = time.time() + seconds
    while not os.path.exists(path):
        if time.time() > end:
            return False
        time.sleep(0.1)
    return True


def publish(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def target(build, shared, ip):
    t = Peer(build, "%s:%d" % (ip, PORT))
    s = Peer(build, "127.0.0.1:0")
    exported = t.cmd("malloc 0 %d rw" % LEN)
    private = t.cmd("malloc 1 %d -" % LEN)
    racing = t.cmd("malloc 2 %d w" % LEN)
    other = s.cmd("malloc 0 %d -" % LEN)
    t.cmd("fill 1 0 %d 11" % LEN)
    s.cmd("fill 0 0 %d 12" % LEN)
    sums = (t.cmd("sum 1 0 %d" % LEN), s.cmd("sum 0 0 %d" % LEN))
    publish(os.path.join(shared, "protect-addrs"),
            "%s %s %s %s %s\n" % (t.addr, exported, private, other, racing))
    # Guest 0 streams writes into region 2: unregister it under them.
    race = "timeout"
    if await_file(os.path.join(shared, "race-go"), 300):
        time.sleep(1)
        st = t.cmd("unreg 2")
        h1 = t.cmd("sum 2 0 %d" % LEN)
        time.sleep(2)
        h2 = t.cmd("sum 2 0 %d" % LEN)
        race = "%s %s" % (st, "same" if h1 == h2 else "changed")
    publish(os.path.join(shared, "race-result"), race + "\n")
    ok = await_file(os.path.join(shared, "protect-done"), 300)
    after = (t.cmd("sum 1 0 %d" % LEN), s.cmd("sum 0 0 %d" % LEN))
    good = t.cmd("sum 0 0 4096")
    publish(os.path.join(shared, "protect-result"),
            "%s %s %s\n" % ("same" if after == sums else "changed",
                            "done" if ok else "timeout", good))
    t.stop()
    s.stop()


def initiator(build, shared, ip):
    fails = 0

    def check(name, cond, why):
        nonlocal fails
        if cond:
            print("[PASS] rxe::%s" % name)
        else:
            print("[FAIL] rxe::%s: %s" % (name, why))
            fails += 1

    if not await_file(os.path.join(shared, "protect-addrs"), 300):
        check("protect", False, "guest 1 published no addresses")
        return 1
    with open(os.path.join(shared, "protect-addrs")) as f:
        taddr, exported, private, other, racing = f.read().split()
    i = Peer(build, "%s:0" % ip)
    try:
        i.cmd("malloc 0 %d rw" % LEN)
        i.cmd("fill 0 0 %d 3" % LEN)
        i.cmd("open %s" % taddr)
        # Writes stream into region 2 until one fails: it was
        # unregistered under them (EACCES from the NIC, or ERANGE once
        # this engine heard of it).
        cmd = "stream write 0 0 %s 4096 100000000" % racing
        i.send(cmd)
        publish(os.path.join(shared, "race-go"), "\n")
        st, n = i.reply(cmd).split()
        if not await_file(os.path.join(shared, "race-result"), 120):
            check("unregister_closes", False, "guest 1 reported nothing")
        else:
            with open(os.path.join(shared, "race-result")) as f:
                got = f.read().split()
            check("unregister_closes",
                  got == ["0", "same"] and int(st) in (-EACCES, -ERANGE),
                  "unregister %s, memory %s after it; the stream ended "
                  "with %s after %s writes" % (got[0], got[-1], st, n))
        st = int(i.cmd("write 0 0 %s 4096" % exported))
        check("protect_inside", st == 0, "a write inside the region: %d" % st)
        # The private region of the same process, then another process's.
        for name, where in (("neighbour", private), ("other_process", other)):
            i.cmd("forge 0 %s" % where)
            st = int(i.cmd("write 0 0 %s 4096" % where))
            check("protect_write_" + name, st == -EACCES,
                  "a write outside the region returned %d, not -EACCES" % st)
            st = int(i.cmd("stream read 0 0 %s 4096 1" % where).split()[0])
            check("protect_read_" + name, st == -EACCES,
                  "a read outside the region returned %d, not -EACCES" % st)
        # The peer stays usable: its queue pairs are armed again.
        i.cmd("forge 0 %s" % exported)
        st = -1
        end = time.time() + 60
        while st != 0 and time.time() < end:
            st = int(i.cmd("write 0 0 %s 4096" % exported))
        check("protect_after", st == 0, "no write succeeded after: %d" % st)
        want = i.cmd("sum 0 0 4096")
    finally:
        publish(os.path.join(shared, "protect-done"), "\n")
        i.stop()
    if not await_file(os.path.join(shared, "protect-result"), 120):
        check("protect_untouched", False, "guest 1 reported nothing")
        return 1
    with open(os.path.join(shared, "protect-result")) as f:
        same, done, got = f.read().split()
    check("protect_untouched", same == "same" and done == "done",
          "memory outside the region: %s (%s)" % (same, done))
    check("protect_bytes", got == want, "the last good write: %s != %s" %
          (got, want))
    return 1 if fails else 0


def main():
    role, build, shared, ip = sys.argv[1:5]
    if role == "target":
        target(build, shared, ip)
        return 0
    return initiator(build, shared, ip)


if __name__ == "__main__":
    sys.exit(main())
