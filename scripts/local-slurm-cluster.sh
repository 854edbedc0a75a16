#!/usr/bin/env bash
# A virtual 4-node Slurm cluster on this host, for tests and demos:
#   one slurmctld and four `slurmd -N nX` daemons (n1..n4) sharing this machine.
#   scripts/local-slurm-cluster.sh start|stop|status|install
# Needs root (it runs munged and the Slurm daemons). `install` apt-installs
# slurm-wlm and munge; `start` installs them first if they are missing.
set -euo pipefail

NODES=${SLURM_TEST_NODES:-4}
CPUS=${SLURM_TEST_CPUS:-2}
BASE=${SLURM_TEST_DIR:-/var/tmp/scalestudy-slurm}
CONF_DIR=/etc/slurm
HOST=$(hostname)

log() { echo "local-slurm-cluster: $*" >&2; }

install() {
  if command -v slurmctld >/dev/null && command -v munged >/dev/null; then return 0; fi
  log "installing slurm-wlm and munge (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

write_conf() {
  mkdir -p "$CONF_DIR" "$BASE"/{ctld,log} /run/munge
  local last=$NODES
  cat > "$CONF_DIR/slurm.conf" <<CONF
ClusterName=scalestudy
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=16817
StateSaveLocation=$BASE/ctld
SlurmdSpoolDir=$BASE/spool-%n
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=n[1-$last] NodeHostname=$HOST Port=17001-$((17000 + last)) CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=n[1-$last] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  rm -f "$CONF_DIR/cgroup.conf"  # proctrack/linuxproc + task/none: no cgroups needed
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  [ -f /etc/munge/munge.key ] || (mungekey -c -f 2>/dev/null || /usr/sbin/create-munge-key -f >/dev/null)
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
  su -s /bin/sh munge -c "/usr/sbin/munged" 2>/dev/null || /usr/sbin/munged --force
}

is_up() {
  command -v sinfo >/dev/null && timeout 5 sinfo -h -o "%T" 2>/dev/null | grep -qE "idle|mixed|alloc"
}

start() {
  install
  if is_up; then log "already running"; status; return 0; fi
  write_conf
  start_munge
  pkill -x slurmctld 2>/dev/null || true
  pkill -x slurmd 2>/dev/null || true
  sleep 0.5
  slurmctld -c
  for i in $(seq 1 "$NODES"); do mkdir -p "$BASE/spool-n$i"; slurmd -N "n$i"; done
  for _ in $(seq 1 60); do
    if [ "$(sinfo -h -o '%D %T' 2>/dev/null | awk '$2 ~ /idle/ {n += $1} END {print n + 0}')" -ge "$NODES" ]; then
      log "up: $NODES nodes (n1..n$NODES) on $HOST"; return 0
    fi
    scontrol update NodeName="n[1-$NODES]" State=RESUME >/dev/null 2>&1 || true
    sleep 0.5
  done
  log "nodes did not come up; see $BASE/log"; sinfo >&2 || true; return 1
}

stop() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  log "stopped"
}

status() {
  if is_up; then sinfo; else log "not running"; return 1; fi
}

case "${1:-status}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; sleep 1; start ;;
  *) echo "usage: $0 start|stop|status|restart|install" >&2; exit 2 ;;
esac
