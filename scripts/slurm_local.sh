#!/usr/bin/env bash
# A one-node SLURM cluster with accounting on this Debian machine, for tests and trying sweeps.
#   scripts/slurm_local.sh up     install (apt, once), configure, start every daemon, wait for a job
#   scripts/slurm_local.sh down   stop only the daemons that `up` started (by the pids it saved)
# Needs root and apt (no systemd: the daemons are started here). Idempotent: `up` on a running
# cluster only checks it. State (pids, logs, database) lives under $JACBENCH_SLURM_STATE.
set -euo pipefail
STATE=${JACBENCH_SLURM_STATE:-/var/lib/jacbench-slurm}
PIDS=$STATE/pids
PKGS=(munge slurmctld slurmd slurm-client slurmdbd slurm-wlm-mysql-plugin mariadb-server)

die() { echo "slurm_local: $*" >&2; exit 1; }

install_packages() {
  local missing=()
  for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return
  command -v apt-get >/dev/null || die "no apt-get: install ${missing[*]} yourself"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; } \
    || die "apt-get install ${missing[*]} failed"
}

write_config() {
  local host node
  host=$(hostname -s)
  node=$(slurmd -C | head -1 | sed 's/ UpTime=.*//')
  mkdir -p /etc/slurm
  cat > /etc/slurm/slurm.conf <<CONF
# Written by jacbench scripts/slurm_local.sh: one node, accounting through slurmdbd.
ClusterName=jacbench
SlurmctldHost=$host
SlurmUser=slurm
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# Impossible requests (more CPUs/memory than any node has) fail at submit with SLURM's message
# instead of pending forever.
EnforcePartLimits=ALL
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$host
ReturnToService=2
SchedulerParameters=sched_interval=1
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat > /etc/slurm/slurmdbd.conf <<CONF
DbdHost=$host
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=/run/mysqld/mysqld.sock
PidFile=/run/slurm/slurmdbd.pid
LogFile=$STATE/slurmdbd.log
CONF
  chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
}

alive() { [ -f "$PIDS/$1" ] && kill -0 "$(cat "$PIDS/$1")" 2>/dev/null; }

# start NAME PIDFILE CMD...: run a daemon that forks, record the pid it writes.
start() {
  local name=$1 pidfile=$2; shift 2
  alive "$name" && return
  rm -f "$pidfile"
  "$@"
  for _ in $(seq 100); do [ -s "$pidfile" ] && break; sleep 0.1; done
  [ -s "$pidfile" ] || die "$name did not start (see $STATE/*.log)"
  cp "$pidfile" "$PIDS/$name"
}

wait_for() {  # wait_for SECONDS DESCRIPTION CMD...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return; sleep 0.2; done
  die "timed out waiting for $what"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (installs packages and starts daemons)"
  install_packages
  mkdir -p "$PIDS" "$STATE/ctld" "$STATE/d" /run/munge /run/slurm /run/mysqld
  chown munge:munge /run/munge; chown slurm:slurm /run/slurm "$STATE/ctld" "$STATE"
  chown mysql:mysql /run/mysqld
  write_config
  [ -f /etc/munge/munge.key ] || /usr/sbin/mungekey --create >/dev/null 2>&1 || true
  start munged /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
  if ! alive mariadbd; then
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
    (mariadbd --user=mysql --skip-networking --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --log-error="$STATE/mariadb.log" >/dev/null 2>&1 &)
    for _ in $(seq 150); do [ -S /run/mysqld/mysqld.sock ] && [ -s /run/mysqld/mysqld.pid ] && break; sleep 0.1; done
    [ -s /run/mysqld/mysqld.pid ] || die "mariadbd did not start (see $STATE/mariadb.log)"
    cp /run/mysqld/mysqld.pid "$PIDS/mariadbd"
    wait_for 20 "mariadb" mariadb -e "select 1"
    mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  fi
  start slurmdbd /run/slurm/slurmdbd.pid /usr/sbin/slurmdbd
  wait_for 30 "slurmdbd" sacctmgr -i list cluster
  start slurmctld /run/slurm/slurmctld.pid /usr/sbin/slurmctld
  start slurmd /run/slurm/slurmd.pid /usr/sbin/slurmd
  wait_for 30 "the node to be idle" bash -c "sinfo -h -o %t | grep -Eq '^(idle|mix|alloc)'"
  # A test job that runs and that accounting sees: the cluster is ready.
  local job
  job=$(sbatch --parsable -o /dev/null --wrap true) || die "test job refused"
  wait_for 60 "test job $job to complete in sacct" \
    bash -c "sacct -n -X -j $job -o State | grep -q COMPLETED"
  echo "slurm_local: up ($(sinfo -h -o '%P %D nodes %c cpus %m MB'))"
}

down() {
  [ -d "$PIDS" ] || { echo "slurm_local: nothing started"; return; }
  for name in slurmd slurmctld slurmdbd mariadbd munged; do
    if alive "$name"; then
      local pid; pid=$(cat "$PIDS/$name")
      kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PIDS/$name"
  done
  echo "slurm_local: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) die "usage: $0 up|down" ;;
esac
