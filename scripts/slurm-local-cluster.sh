#!/usr/bin/env bash
# Start (or stop) a one-node SLURM cluster on this machine: munge + slurmctld + slurmd from Debian's
# slurm-wlm, no accounting storage. Used by the SLURM test and CI; needs root.
#   scripts/slurm-local-cluster.sh start|stop|status
set -euo pipefail
action=${1:-start}
conf_dir=/etc/slurm
state=/var/spool/slurmctld
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null
}

# MessageTimeout=2 (SLURM's default is 10): while this cluster is down, as between its test runs, every `snakemake`
# start on this machine runs `scontrol show config` (snakemake-executor-plugin-slurm's job_status_query, at import)
# and waits for the dead controller: 9 s at the default, 1 s at 2. A one-node cluster answers in milliseconds.
configure() {
  mkdir -p "$conf_dir" "$state" /var/spool/slurmd /var/log/slurm /run/munge /var/log/munge /var/lib/munge
  cat > "$conf_dir/slurm.conf" <<CONF
ClusterName=stackbench-local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=$state
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmUser=root
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MessageTimeout=2
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
}

start() {
  install
  configure
  pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
  pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
  pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "slurm: one-node cluster up ($host, $cpus CPUs, partition cpu)"; return 0
    fi
    scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  echo "slurm: node did not become idle; see /var/log/slurm/" >&2
  return 1
}

stop() {
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
}

case "$action" in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
