#!/usr/bin/env bash
# A Slurm cluster on this machine for the launcher's tests: munged, slurmctld and three
# slurmd emulating three nodes (g1: Features=gpu with a GRES gpu:1 on /dev/null, for the
# learner side; c1, c2: Features=cpu, for actors), each on its own port, everything in
# DIR, no systemd. Run as root (slurmd needs it).
#
#   tools/slurm/test_cluster.sh start DIR    # prints "export SLURM_CONF=..." when up
#   tools/slurm/test_cluster.sh stop DIR     # stops every daemon it started, by PID
#
# Exits 3 (with the reason on stderr) where Slurm cannot start here: not root, the
# packages missing (apt-get install slurm-wlm munge), or a daemon that does not come up.
set -u
cmd=${1:-}
DIR=${2:-}
[[ -n "$cmd" && -n "$DIR" ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
DIR=$(realpath -m "$DIR")

stop() {
  for f in "$DIR"/pids/*.pid; do
    [[ -f "$f" ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null
  done
  sleep 0.5
  for f in "$DIR"/pids/*.pid; do
    [[ -f "$f" ]] || continue
    pid=$(cat "$f")
    kill -9 "$pid" 2>/dev/null
    rm -f "$f"
  done
  # Job steps the daemons started (slurmstepd) outlive them if a job was still running.
  pkill -9 -f "slurmstepd.*$DIR" 2>/dev/null
  return 0
}

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

skip() { echo "slurm test cluster: $*" >&2; exit 3; }
[[ $(id -u) == 0 ]] || skip "needs root (slurmd runs jobs as their users)"
for b in munged slurmctld slurmd sbatch scontrol; do
  command -v "$b" > /dev/null || skip "$b not found (apt-get install slurm-wlm munge)"
done

mkdir -p "$DIR"/{pids,log,spool/ctld,munge,state}
chmod 700 "$DIR/munge"
# munge: its own key, socket and pid file in DIR.
if [[ ! -f "$DIR/munge/munge.key" ]]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
fi
MUNGE_SOCKET="$DIR/munge/munge.socket"
munged -F --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed" \
  > "$DIR/log/munged.out" 2>&1 &
echo $! > "$DIR/pids/munged.pid"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(port)
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
cat > "$DIR/slurm.conf" <<CONF
ClusterName=stampede-test
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/state/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MaxArraySize=1001
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=10
NodeName=g1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(port) CPUs=$CPUS RealMemory=$MEM Features=gpu Gres=gpu:1 State=UNKNOWN
NodeName=c1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(port) CPUs=$CPUS RealMemory=$MEM Features=cpu State=UNKNOWN
NodeName=c2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(port) CPUs=$CPUS RealMemory=$MEM Features=cpu State=UNKNOWN
PartitionName=test Nodes=g1,c1,c2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
cat > "$DIR/gres.conf" <<CONF
NodeName=g1 Name=gpu File=/dev/null
CONF
export SLURM_CONF="$DIR/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" > "$DIR/log/slurmctld.out" 2>&1 &
echo $! > "$DIR/pids/slurmctld.pid"
for n in g1 c1 c2; do
  mkdir -p "$DIR/spool/$n"
  slurmd -D -N "$n" -f "$SLURM_CONF" > "$DIR/log/slurmd-$n.out" 2>&1 &
  echo $! > "$DIR/pids/slurmd-$n.pid"
done
# Up when every node is idle.
for _ in $(seq 1 100); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /idle/' | wc -l)
  [[ "$idle" -ge 3 ]] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm test cluster: the nodes did not become idle in 20 s:" >&2
sinfo -N 2>&1 | head >&2
tail -5 "$DIR"/log/*.log "$DIR"/log/*.out >&2 2>/dev/null
stop
exit 3
