#!/usr/bin/env bash
# A fleet across three hosts on this machine (issue 19): network namespaces joined by a
# bridge (the learner + PS + coordinator host, two actor hosts), 1% packet loss each way
# on the actor hosts (iptables statistic) and, where the kernel has netem, 10 +- 2 ms of
# delay on every link. The roles are started in their namespaces by hand against
# `stampede coordinator`, learn Catch to the budget, and one actor host's link goes down
# for 10 s mid-run: its actor reconnects and the run completes. Then the same fleet on
# loopback (`stampede run`) for the figures: frames/s and policy lag, both ways.
#
#   tools/netns_drill.sh [FRAMES]       (default 6000000; needs root, ip, iptables)
#
# Exits 0 when the run across namespaces ends with exit 0, every role exits 0, the
# budget is spent, the downed actor sent again after its link came back and the final
# checkpoint is complete; 3 where namespaces cannot be made here (with the reason).
set -u
cd "$(dirname "$0")/.."
BIN=$(realpath "${STAMPEDE_BIN:-build/tools/stampede}")
FRAMES=${1:-6000000}
skip() { echo "netns drill: SKIPPED: $*" >&2; exit 3; }
[[ $(id -u) == 0 ]] || skip "needs root (ip netns)"
command -v ip > /dev/null || skip "ip not found (apt-get install iproute2)"
command -v iptables > /dev/null || skip "iptables not found (apt-get install iptables)"
[[ -x "$BIN" ]] || { echo "netns drill: $BIN not built" >&2; exit 2; }

W=$(mktemp -d /tmp/stampede-netns.XXXXXX)
TAG=$$
S=stp-srv-$TAG A1=stp-act1-$TAG A2=stp-act2-$TAG
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
  for n in "$S" "$A1" "$A2"; do ip netns del "$n" 2> /dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT

ip netns add "$S" || skip "ip netns add failed"
ip netns add "$A1" && ip netns add "$A2" || skip "ip netns add failed"
for n in "$S" "$A1" "$A2"; do ip -n "$n" link set lo up; done
ip -n "$S" link add br0 type bridge && ip -n "$S" link set br0 up && ip -n "$S" addr add 10.77.0.1/24 dev br0 ||
  skip "no bridge in the namespace"
for i in 1 2; do
  a=$([[ $i == 1 ]] && echo "$A1" || echo "$A2")
  ip link add "vs$i-$TAG" netns "$S" type veth peer name "va$i" netns "$a" || skip "veth failed"
  ip -n "$S" link set "vs$i-$TAG" master br0 up
  ip -n "$a" addr add "10.77.0.$((1 + i))/24" dev "va$i"
  ip -n "$a" link set "va$i" up
done
# Delay: netem, where the kernel has it (CONFIG_NET_SCH_NETEM).
DELAY="none (this kernel has no netem)"
if ip netns exec "$A1" tc qdisc add dev va1 root netem delay 10ms 2ms 2> /dev/null; then
  ip netns exec "$A2" tc qdisc add dev va2 root netem delay 10ms 2ms
  for i in 1 2; do ip netns exec "$S" tc qdisc add dev "vs$i-$TAG" root netem delay 10ms 2ms; done
  DELAY="10 ms +- 2 ms each way"
fi
# Loss: 1% of packets each way on both actor hosts.
for a in "$A1" "$A2"; do
  ip netns exec "$a" iptables -A INPUT -m statistic --mode random --probability 0.01 -j DROP
  ip netns exec "$a" iptables -A OUTPUT -m statistic --mode random --probability 0.01 -j DROP
done
# Reachable: a TCP connection to a closed port is refused (not timed out).
reach='import socket, sys
s = socket.socket(); s.settimeout(3)
try: s.connect(("10.77.0.1", 9))
except ConnectionRefusedError: sys.exit(0)
except OSError: sys.exit(1)'
for a in "$A1" "$A2"; do
  ip netns exec "$a" python3 -c "$reach" || ip netns exec "$a" python3 -c "$reach" ||
    skip "actor host $a does not reach the server host"
done

H=10.77.0.1
cat > "$W/fleet.textproto" << CFG
$(grep -v '^ *#' configs/catch.textproto)
cluster {
  coordinator: "tcp://$H:7101"
  control: "tcp://$H:7102"
  learner: "tcp://$H:7103"
  ps: "tcp://$H:7104"
  ps: "tcp://$H:7105"
  keys_dir: "$W/keys"
}
CFG
SETS=(--set "stop.total_env_frames=$FRAMES" --set stop.stop_at_target=false)
"$BIN" keys "$W/fleet.textproto" "$W/keys" > /dev/null || { echo "netns drill: stampede keys failed" >&2; exit 1; }
RUN=$W/run
ip netns exec "$S" "$BIN" coordinator "$W/fleet.textproto" --run-dir "$RUN" "${SETS[@]}" > "$W/coordinator.out" 2>&1 &
COORD=$!
PIDS+=("$COORD")
for _ in $(seq 1 100); do [[ -f "$RUN/config.textproto" ]] && break; sleep 0.1; done
[[ -f "$RUN/config.textproto" ]] || { echo "netns drill: the coordinator wrote no config" >&2; cat "$W/coordinator.out" >&2; exit 1; }
C=$RUN/config.textproto
declare -A ROLE_PID
start() {  # NAMESPACE ROLE INDEX
  ip netns exec "$1" "$BIN" "$2" --config "$C" --task-index "$3" > "$W/$2-$3.log" 2>&1 &
  ROLE_PID["$2-$3"]=$!
  PIDS+=($!)
}
start "$S" ps 0
start "$S" ps 1
start "$S" learner 0
start "$A1" actor 0
start "$A2" actor 1
# Mid-run: actor host 1's link down for 10 s.
frames_now() { tail -n 20 "$RUN/metrics.jsonl" 2> /dev/null | python3 -c '
import json, sys
f = 0
for line in sys.stdin:
    try: r = json.loads(line)
    except ValueError: continue
    f = max(f, r.get("env_frames", 0))
print(f)'; }
for _ in $(seq 1 300); do [[ $(frames_now) -gt $((FRAMES / 5)) ]] && break; sleep 0.1; done
sent_before=$(grep -c . "$W/actor-0.log")
ip -n "$A1" link set va1 down
DOWN_AT=$(frames_now)
sleep 10
ip -n "$A1" link set va1 up
UP_AT=$(frames_now)
wait "$COORD"
rc=$?
roles_ok=0
for k in "${!ROLE_PID[@]}"; do
  if ! wait "${ROLE_PID[$k]}"; then roles_ok=1; echo "netns drill: $k exited non-zero; its log:" >&2; tail -5 "$W/$k.log" >&2; fi
done
figures() {  # RUN_DIR: frames/s, mean and max policy lag over the progress rows, dropped
  python3 - "$1" << 'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
rows = []
for line in open(d + "/metrics.jsonl"):
    try: r = json.loads(line)
    except ValueError: continue
    if "event" not in r and "policy_lag_mean" in r and r.get("env_frames", 0) > 0: rows.append(r)
lag = sum(r["policy_lag_mean"] for r in rows) / max(1, len(rows))
lag_max = max([r["policy_lag_max"] for r in rows] or [0])
dropped = rows[-1].get("dropped_trajectories", 0) if rows else -1
t0 = s["actors"].get("0", {}).get("trajectories", 0)
print(f'{s["frames_per_second"]:.0f} {lag:.1f} {lag_max} {dropped} {s["env_frames"]} {t0} {s["exit_code"]}')
PY
}
read -r fps lag lag_max dropped frames traj0 _ <<< "$(figures "$RUN")"
ckpt=$("$BIN" checkpoints "$RUN" 2>&1); ckpt_rc=$?
# The same fleet on loopback.
grep -v '^ *#' configs/catch.textproto > "$W/loop.textproto"
"$BIN" run "$W/loop.textproto" --run-dir "$W/loop" "${SETS[@]}" > "$W/loop.out" 2>&1
read -r lfps llag llag_max ldropped lframes _ _ <<< "$(figures "$W/loop")"

echo "netns drill: 3 hosts (servers 10.77.0.1, actors 10.77.0.2 and .3), delay: $DELAY, loss 1% each way"
echo "  actor host 1 down from $DOWN_AT to $UP_AT frames (10 s)"
printf '  %-22s %12s %12s %12s %10s %10s\n' fleet "frames/s" "lag mean" "lag max" dropped frames
printf '  %-22s %12s %12s %12s %10s %10s\n' "across namespaces" "$fps" "$lag" "$lag_max" "$dropped" "$frames"
printf '  %-22s %12s %12s %12s %10s %10s\n' "loopback" "$lfps" "$llag" "$llag_max" "$ldropped" "$lframes"
fail=0
[[ $rc == 0 ]] || { echo "  FAIL: the coordinator exited $rc; its output:" >&2; tail -8 "$W/coordinator.out" >&2; fail=1; }
[[ $roles_ok == 0 ]] || fail=1
[[ ${frames:-0} -ge $FRAMES ]] || { echo "  FAIL: $frames frames, budget $FRAMES" >&2; fail=1; }
[[ $ckpt_rc == 0 ]] || { echo "  FAIL: no complete final checkpoint: $ckpt" >&2; fail=1; }
# The downed actor sent again after its link came back: its trajectories at the end
# exceed what it could have sent before the link went down.
before=$(python3 -c '
import json, sys
last = 0
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: continue
    if "event" in r or r.get("env_frames", 0) > int(sys.argv[2]): continue
    last = r.get("actors", {}).get("0", {}).get("trajectories", last)
print(last)' "$RUN/metrics.jsonl" "$DOWN_AT")
[[ ${traj0:-0} -gt $((before + 10)) ]] || { echo "  FAIL: actor 0 sent $traj0 trajectories in all, $before before its link went down" >&2; fail=1; }
if [[ $fail == 0 ]]; then echo "netns drill: PASS (actor 0: $before trajectories before the link went down, $traj0 at the end)"; fi
exit $fail
