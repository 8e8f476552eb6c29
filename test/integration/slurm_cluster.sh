# shellcheck shell=bash
# A real one-node Slurm cluster on localhost for the tests (sourced): Debian's munged, slurmctld
# and slurmd, their config, state, spool, sockets and logs in one temporary folder, on free
# ports and their own SLURM_CONF, so nothing of the machine's own Slurm (if any) is read or
# touched and two test runs on one machine do not meet. Run as root (slurmd starts each job as
# its user), or as a user with passwordless sudo, which then starts the daemons.
#
#   slurm_cluster_start DIR   starts the cluster and waits until its node is idle; exports
#                             SLURM_CONF; exits 77 (ctest: skipped) only when slurmctld cannot
#                             run here at all (no root, Slurm not installed, or it dies at start)
#   slurm_cluster_stop        cancels the jobs, stops the daemons it started, by their pids;
#                             safe to call twice and before start (an EXIT trap calls it)
#   slurm_job_field ID KEY    one field of `scontrol show job`, e.g. JobState, ExitCode, Restarts
#   slurm_wait_job ID SECONDS waits until the job has ended (or fails the test) and echoes its
#                             state; a requeued job has not ended
#   slurm_wait_state ID REGEX SECONDS   waits until the job's state matches REGEX
#   slurm_wait_steps_gone ID SECONDS    waits until no step daemon of the job is left on the node

slurm_cluster_dir=""
slurm_as_root=()

slurm_skip() {
  echo "SKIPPED: $*" >&2
  exit 77
}

slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_cluster_start() {
  local dir=$1
  if [[ $(id -u) -ne 0 ]]; then
    sudo -n true 2>/dev/null || slurm_skip "starting slurmd needs root or passwordless sudo"
    slurm_as_root=(sudo -n)
  fi
  local tool
  for tool in munged slurmctld slurmd sbatch scontrol sinfo; do
    command -v "$tool" >/dev/null ||
      slurm_skip "$tool is not installed (scripts/setup.sh installs Debian's slurm-wlm and munge)"
  done
  # Slurm's own environment from an enclosing job (a CI runner that is itself a Slurm job) would
  # leak into our sbatch and srun calls.
  local var
  for var in $(compgen -e | grep '^SLURM_\|^SRUN_\|^SBATCH_\|^SALLOC_' || true); do unset "$var"; done

  mkdir -p "$dir"/{munge,state,spool,log,tmp}
  slurm_cluster_dir=$(cd "$dir" && pwd)
  # Every user must reach munged's socket; munged refuses a key readable by others.
  chmod 755 "$slurm_cluster_dir" "$slurm_cluster_dir/munge" "$slurm_cluster_dir/tmp"
  head -c 128 /dev/urandom >"$slurm_cluster_dir/munge/munge.key"
  chmod 600 "$slurm_cluster_dir/munge/munge.key"
  local socket=$slurm_cluster_dir/munge/munge.socket
  # --force: munged otherwise refuses to start as root.
  "${slurm_as_root[@]}" munged --force --key-file="$slurm_cluster_dir/munge/munge.key" \
    --socket="$socket" --pid-file="$slurm_cluster_dir/munge/munged.pid" \
    --log-file="$slurm_cluster_dir/log/munged.log" --seed-file="$slurm_cluster_dir/munge/seed" ||
    slurm_skip "munged does not start here: $(tail -n 3 "$slurm_cluster_dir/log/munged.log" 2>/dev/null)"

  local ctld_port slurmd_port
  ctld_port=$(slurm_free_port)
  slurmd_port=$(slurm_free_port)
  # proctrack/linuxproc and task/none: no cgroups (containers have none to give). JobRequeue=1:
  # batch jobs may requeue. MinJobAge: ended jobs stay visible to scontrol for the checks.
  # TmpFS and FirstJobId: srun's PMIx rendezvous files (named by job id) stay apart from those of
  # another test cluster on the same machine.
  cat >"$slurm_cluster_dir/slurm.conf" <<EOF
ClusterName=mvibrtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$slurm_cluster_dir/state
SlurmdSpoolDir=$slurm_cluster_dir/spool
TmpFS=$slurm_cluster_dir/tmp
SlurmctldPidFile=$slurm_cluster_dir/slurmctld.pid
SlurmdPidFile=$slurm_cluster_dir/slurmd.pid
SlurmctldLogFile=$slurm_cluster_dir/log/slurmctld.log
SlurmdLogFile=$slurm_cluster_dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
ReturnToService=2
MinJobAge=3600
KillWait=10
FirstJobId=$((RANDOM * 10 + 1000))
JobCompType=jobcomp/filetxt
JobCompLoc=$slurm_cluster_dir/log/jobcomp.txt
NodeName=localhost CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$slurm_cluster_dir/slurm.conf
  "${slurm_as_root[@]}" slurmctld -f "$SLURM_CONF" ||
    slurm_skip "slurmctld does not start here: $(tail -n 5 "$slurm_cluster_dir/log/slurmctld.log" 2>/dev/null)"
  local i
  for i in $(seq 100); do
    scontrol ping 2>/dev/null | grep -q "is UP" && break
    if ((i == 100)); then
      slurm_skip "slurmctld does not answer here: $(tail -n 5 "$slurm_cluster_dir/log/slurmctld.log" 2>/dev/null)"
    fi
    sleep 0.1
  done
  # From here on slurmctld runs: a cluster that does not come up is a failure, not a skip.
  # -N: the node is "localhost" whatever the machine's hostname.
  "${slurm_as_root[@]}" slurmd -f "$SLURM_CONF" -N localhost ||
    fail "slurmd did not start: $(tail -n 5 "$slurm_cluster_dir/log/slurmd.log" 2>/dev/null)"
  for i in $(seq 300); do
    [[ $(sinfo -h -n localhost -o %T 2>/dev/null) == idle ]] && break
    ((i < 300)) || fail "the node is not idle after 30 s: $(sinfo 2>&1; tail -n 5 "$slurm_cluster_dir/log/slurmd.log")"
    sleep 0.1
  done
  echo "slurm: cluster up in $slurm_cluster_dir ($(sinfo -h -o '%P %D node(s) %c CPUs %T'))"
}

# Stops a daemon by the pid in FILE, and waits for it to go.
slurm_stop_pid() {
  local file=$1 pid
  [[ -f $file ]] || return 0
  pid=$(cat "$file")
  [[ -n $pid ]] || return 0
  "${slurm_as_root[@]}" kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    "${slurm_as_root[@]}" kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  "${slurm_as_root[@]}" kill -9 "$pid" 2>/dev/null || true
}

slurm_cluster_stop() {
  [[ -n $slurm_cluster_dir ]] || return 0
  local dir=$slurm_cluster_dir
  slurm_cluster_dir=""
  if [[ -f $dir/slurmctld.pid ]]; then
    # Jobs first, so that slurmd's step daemons end their processes themselves.
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 100); do
        [[ -z $(squeue -h -t running,completing -o %i 2>/dev/null) ]] && break
        sleep 0.1
      done
    fi
  fi
  slurm_stop_pid "$dir/slurmd.pid"
  slurm_stop_pid "$dir/slurmctld.pid"
  slurm_stop_pid "$dir/munge/munged.pid"
  # Under sudo the daemons' files are root's: the caller could not remove them.
  if [[ ${#slurm_as_root[@]} -gt 0 && -z ${MVIBR_KEEP_SLURM_TEST:-} ]]; then
    "${slurm_as_root[@]}" rm -rf "$dir"
  fi
}

slurm_job_field() {
  scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

slurm_wait_state() {
  local id=$1 want=$2 limit=$3 state=""
  for _ in $(seq $((limit * 5))); do
    state=$(slurm_job_field "$id" JobState)
    [[ $state =~ ^($want)$ ]] && return 0
    sleep 0.2
  done
  fail "job $id is ${state:-unknown} after $limit s, expected $want"
}

slurm_wait_job() {
  local id=$1 limit=$2 state=""
  for _ in $(seq $((limit * 5))); do
    state=$(slurm_job_field "$id" JobState)
    case $state in
      PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | RESIZING | SUSPENDED | "") ;;
      *)
        echo "$state"
        return 0
        ;;
    esac
    sleep 0.2
  done
  fail "job $id has not ended after $limit s (state ${state:-unknown})"
}

# slurmstepd keeps a socket per step in the spool folder (<node>_<job>.<step>, and the PMIx
# server's stepd.slurm.pmix.<job>.<step>) until it has cleaned up, which can outlast the job's
# end by seconds. A requeued job started again before then cannot launch its step 0 (the
# socket's name is taken); Slurm's own two-minute delay before a requeued job may start hides it.
slurm_wait_steps_gone() {
  local id=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    compgen -G "$slurm_cluster_dir/spool/*[._]$id.*" >/dev/null || return 0
    sleep 0.1
  done
  fail "job $id's step daemons are still there after $limit s: $(ls "$slurm_cluster_dir/spool")"
}
