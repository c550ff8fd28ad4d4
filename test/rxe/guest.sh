#!/bin/sh
# The RDMA transport on real verbs: run by test/rxe/run in both guests of
# scripts/rxe-vm (soft-RoCE, two rails each).  Guest 1 keeps a kvfwd
# target; guest 0 runs the cases against it.  The guests agree through
# files in $RXE_SHARED.  Each case prints [PASS] NAME or [FAIL] NAME:
# why (the form scripts/test-report counts).
set -u
BUILD=${BUILD:-build}
K=$BUILD/apps/kvfwd/kvfwd
PEERBIN=$BUILD/test/kvt-testpeer
# Emulated CPUs are ~10x slower than hardware: generous timeouts.  The
# default idle policy: a waiting lcore wakes on its completion channel.
KVT="--kvt-pmd rdma --kvt-timeout 10000"
PORT=7471
W=/tmp/rxe-test
mkdir -p $W

signal() { touch "$RXE_SHARED/$1"; }
# await NAME SECONDS: 0 once $RXE_SHARED/NAME exists, 1 when time ran out.
await() {
	t=$(($2 * 10))
	while [ ! -e "$RXE_SHARED/$1" ]; do
		t=$((t - 1))
		[ $t -gt 0 ] || return 1
		sleep 0.1
	done
}
# Bytes through a guest NIC so far: nic_bytes ethN tx|rx
nic_bytes() { cat "/sys/class/net/$1/statistics/$2_bytes"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

target_start() {
	$K --log-level='kvt*:debug' -- $KVT --kvt-listen "$RXE_IP0:$PORT" \
		target --buffer 64M >"$W/target.$1.log" 2>&1 &
	echo $! >"$W/target.pid"
	t=100
	until grep -q "listening on" "$W/target.$1.log"; do
		t=$((t - 1))
		if [ $t -le 0 ] || ! kill -0 "$(cat "$W/target.pid")" 2>/dev/null; then
			echo "target did not start:"
			cat "$W/target.$1.log"
			return 1
		fi
		sleep 0.2
	done
}

# ---- guest 1: the target ----
if [ "$RXE_GUEST" = 1 ]; then
	target_start 1 || { signal target-failed; exit 1; }
	signal target-ready
	await kill-target 900 || exit 1
	kill -9 "$(cat "$W/target.pid")"
	signal target-killed
	wait 2>/dev/null
	echo "--- first target's log (killed):"
	tail -15 "$W/target.1.log"
	target_start 2 || { signal target-failed; exit 1; }
	signal target-ready-2
	await all-done 900
	kill "$(cat "$W/target.pid")" 2>/dev/null
	wait 2>/dev/null
	echo "--- second target's log:"
	tail -15 "$W/target.2.log"
	python3 test/rxe/protect.py target "$BUILD" "$RXE_SHARED" "$RXE_IP0"
	exit $?
fi

# ---- guest 0: the cases ----
fails=0
pass() { echo "[PASS] rxe::$1"; }
fail() {
	echo "[FAIL] rxe::$1: $2"
	fails=$((fails + 1))
}
finish() {
	signal kill-target
	signal all-done
	echo "rxe: $fails case(s) failed"
	exit $((fails > 0))
}
# A json field of kvfwd's result: field FILE NAME
field() {
	python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
n = sys.argv[2]
if n.startswith("port:"):
    print(sum(p["bytes"] for p in r["ports"] if p["name"] == n[5:]))
else:
    print(r.get(n, ""))' "$1" "$2" 2>/dev/null
}
# initiator NAME ARGS...: a kvfwd initiator run, --json to $W/NAME.json.
initiator() {
	n=$1
	shift
	$K --log-level='kvt*:debug' -- $KVT --kvt-listen "$RXE_IP0:0" \
		initiator --peer "$RXE_PEER0:$PORT" --json "$@" \
		>"$W/$n.json" 2>"$W/$n.log"
}
# A verified run is good when it exited 0 with no error, mixed or stale
# block and checked every block.
verified() {
	[ "$(field "$W/$1.json" errors)" = 0 ] &&
	[ "$(field "$W/$1.json" verify_mixed)" = 0 ] &&
	[ "$(field "$W/$1.json" verify_stale)" = 0 ] &&
	[ "$(field "$W/$1.json" verify_checked)" = "$(field "$W/$1.json" requests)" ]
}

if ! await target-ready 120; then
	fail startup "the target in guest 1 did not start"
	finish
fi

# Start-up: both devices give a port; their limits are read and logged.
if initiator startup --op write --verify --total 1M --block 64K &&
   grep -q "port rdma:rxe0" "$W/startup.log" &&
   grep -q "port rdma:rxe1" "$W/startup.log" &&
   grep -q "rxe0: max_qp_wr .*max_cqe 32767" "$W/startup.log" &&
   grep -q "completion queue 32767" "$W/startup.log" &&
   grep -q "max_msg_sz 8388608" "$W/startup.log"; then
	pass startup
else
	fail startup "ports or limits missing from the log: $(grep -i 'rdma' "$W/startup.log" | head -8)"
fi

# Data: write and read, 1 B to 16 MiB, verified where it lands; page
# lists; both rails carry bytes (kvt's count and the guest's NICs).
b0=$(nic_bytes eth0 tx)
b1=$(nic_bytes eth1 tx)
r0=0
r1=0
for op in write read; do
	for spec in 1:64:16 4095:256K:16 64K:4M:16 1M:8M:8 16M:32M:2; do
		blk=${spec%%:*}
		rest=${spec#*:}
		tot=${rest%%:*}
		bat=${rest#*:}
		n=$op-$blk
		if initiator "$n" --op $op --verify --block "$blk" --total "$tot" \
			--batch "$bat" && verified "$n"; then
			pass "$n"
		else
			fail "$n" "$(tail -3 "$W/$n.log" | tr '\n' ' ') $(cat "$W/$n.json")"
		fi
		r0=$((r0 + $(field "$W/$n.json" port:rdma:rxe0 || echo 0)))
		r1=$((r1 + $(field "$W/$n.json" port:rdma:rxe1 || echo 0)))
	done
done
n=pages
if initiator $n --op write --pages --block 4K --batch 64 --total 4M &&
   [ "$(field "$W/$n.json" errors)" = 0 ]; then
	pass $n
else
	fail $n "$(tail -3 "$W/$n.log" | tr '\n' ' ')"
fi
b0=$(($(nic_bytes eth0 tx) - b0))
b1=$(($(nic_bytes eth1 tx) - b1))
echo "[----] rails: kvt counted rxe0 $r0 B, rxe1 $r1 B; eth0 sent $b0 B, eth1 $b1 B"
if [ $r0 -gt 4194304 ] && [ $r1 -gt 4194304 ] &&
   [ $b0 -gt 2097152 ] && [ $b1 -gt 2097152 ]; then
	pass both_rails_carry
else
	fail both_rails_carry "rxe0 $r0 B, rxe1 $r1 B, eth0 $b0 B, eth1 $b1 B"
fi

# A rail cut mid-transfer: eth1 goes down once bytes flow over it and
# comes back 4 s later.  Every request completes (over rxe0 meanwhile),
# fences and kvfwd's notifications included (those caught on rxe1 move),
# every block checked where it landed; rxe1's queue pairs are re-armed
# and carry bytes again.
n=rail_cut
initiator $n --op write --verify --block 256K --batch 8 --duration 30 &
pid=$!
s1=$(nic_bytes eth1 tx)
t=300
while [ $(($(nic_bytes eth1 tx) - s1)) -lt 2097152 ] && [ $t -gt 0 ]; do
	sleep 0.1
	t=$((t - 1))
done
inflight=$(($(nic_bytes eth1 tx) - s1))
ip link set eth1 down
sleep 4
ip link set eth1 up
up=$(nic_bytes eth1 tx)
wait $pid
rc=$?
after=$(($(nic_bytes eth1 tx) - up))
echo "[----] rail cut: $inflight B had left over eth1 before the cut; $after B after it came back; exit $rc"
if [ $rc = 0 ] && [ "$inflight" -ge 2097152 ] && verified $n &&
   [ $after -gt 1048576 ]; then
	pass $n
else
	fail $n "exit $rc, in flight $inflight B, after $after B: $(grep -v 'debug\|re-armed\|carries slices' "$W/$n.log" | tail -12 | tr '\n' ' ') $(cat "$W/$n.json")"
fi

# The target killed mid-transfer: every request fails within the timeout
# (10 s) with ECONNRESET or ETIMEDOUT; a new target then works.
n=target_killed
initiator $n --op write --block 256K --batch 8 --duration 120 &
pid=$!
s0=$(($(nic_bytes eth0 tx) + $(nic_bytes eth1 tx)))
t=300
while [ $(($(nic_bytes eth0 tx) + $(nic_bytes eth1 tx) - s0)) -lt 2097152 ] && [ $t -gt 0 ]; do
	sleep 0.1
	t=$((t - 1))
done
signal kill-target
await target-killed 60
t0=$(now_ms)
wait $pid
rc=$?
dt=$(($(now_ms) - t0))
echo "[----] target killed: the initiator stopped $dt ms later, exit $rc: $(grep 'request failed\|lost' "$W/$n.log" | head -2 | tr '\n' ' ')"
if [ $rc != 0 ] && [ $dt -le 12000 ] &&
   grep -q "request failed: \(Connection reset by peer\|Connection timed out\)\|peer .* lost" "$W/$n.log"; then
	pass $n
else
	fail $n "exit $rc after $dt ms: $(tail -5 "$W/$n.log" | tr '\n' ' ')"
fi
n=new_target
if await target-ready-2 120 &&
   initiator $n --op write --verify --block 1M --total 8M && verified $n; then
	pass $n
else
	fail $n "$(tail -3 "$W/$n.log" | tr '\n' ' ')"
fi
signal all-done

# Remote protection: requests outside the exported region (the target's
# private memory beside it, another process's memory) that only the NIC
# can refuse fail with EACCES and change nothing (test/rxe/protect.py).
python3 test/rxe/protect.py initiator "$BUILD" "$RXE_SHARED" "$RXE_IP0" ||
	fails=$((fails + 1))

# The hardware script, unchanged but for sizes and timeouts.
n=rdma_test_script
if BUILD=$BUILD TOTAL=16M BLOCK=1M VERIFY_TOTAL=8M KVT_TIMEOUT=10000 IDLE=sleep:50 \
	./scripts/rdma-test >"$W/$n.log" 2>&1; then
	pass $n
else
	fail $n "$(tail -8 "$W/$n.log" | tr '\n' ' ')"
fi
grep "^rdma-test\|throughput" "$W/$n.log" | sed 's/^/[----] /'
finish
