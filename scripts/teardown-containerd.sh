#!/usr/bin/env bash
# teardown-containerd.sh - stops the containerd of setup-containerd.sh and
# removes what it and its containers left: the containers (killed through
# ctr while containerd still answers; after a crash, through the pid files
# its shims wrote), containerd itself (by its recorded pid, never by name),
# its shims, mounts under $E2E_RUN and $E2E_ROOT, the empty pod cgroups
# runc leaves (the kubelet would remove them), and both directories.
# The build cache ($E2E_CACHE) stays unless --purge is given. Takes the
# same E2E_CACHE, E2E_ROOT and E2E_RUN as the setup. Always exits 0 once it
# ran as root: it is called from cleanup paths.
set -uo pipefail
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib-setup.sh"

E2E_CACHE=${E2E_CACHE:-/var/cache/nri-e2e}
E2E_ROOT=${E2E_ROOT:-/var/lib/nri-e2e}
E2E_RUN=${E2E_RUN:-/run/nri-e2e}
PURGE=0
case ${1:-} in
--purge) PURGE=1 ;;
"") ;;
*) die "unknown argument $1 (usage: teardown-containerd.sh [--purge])" ;;
esac
need_root

SOCKET=$E2E_RUN/containerd.sock
CONFIG=$E2E_RUN/config.toml
PIDFILE=$E2E_RUN/containerd.pid
TASKS=$E2E_RUN/state/io.containerd.runtime.v2.task

# The ctr that belongs to the running containerd sits beside the runc its
# config names; any cached one will do otherwise.
CTR=
if [ -f "$CONFIG" ]; then
	runc=$(sed -n 's/^[[:space:]]*BinaryName = "\(.*\)"$/\1/p' "$CONFIG" | head -n 1)
	[ -n "$runc" ] && [ -x "${runc%/*}/ctr" ] && CTR=${runc%/*}/ctr
fi
[ -n "$CTR" ] || CTR=$(compgen -G "$E2E_CACHE/bin/*/ctr" | tail -n 1)
ctr() { [ -n "$CTR" ] && "$CTR" --address "$SOCKET" "$@" 2>/dev/null; }

pid=
[ -s "$PIDFILE" ] && pid=$(cat "$PIDFILE")

# 1. Every task and container, while containerd still runs.
if pid_running "$pid" && ctr version >/dev/null; then
	for ns in $(ctr namespaces ls -q); do
		tasks=$(ctr -n "$ns" tasks ls -q)
		for t in $tasks; do
			ctr -n "$ns" tasks kill --all --signal SIGKILL "$t" >/dev/null
		done
		for t in $tasks; do
			# The delete fails until the task has exited.
			for _ in $(seq 50); do
				ctr -n "$ns" tasks ls -q | grep -qxF "$t" || break
				ctr -n "$ns" tasks delete --force "$t" >/dev/null && break
				sleep 0.1
			done
		done
		for c in $(ctr -n "$ns" containers ls -q); do
			ctr -n "$ns" containers delete "$c" >/dev/null
		done
		[ -z "$tasks" ] || log "namespace $ns: $(wc -w <<<"$tasks") container(s) killed"
	done
fi

# 2. containerd.
if pid_running "$pid"; then
	stop_pid containerd "$pid" 10
elif [ -n "$pid" ]; then
	log "containerd (pid $pid) had already exited"
fi
rm -f "$PIDFILE"

# 3. What a crashed containerd left running. A container's process is
# taken from its task's init.pid only if it still sits in that container's
# cgroup (the pid may have been reused); a shim only if its command line
# names this containerd's socket.
shim_of_ours() {
	local prev='' arg
	[ -r "/proc/$1/cmdline" ] || return 1
	while IFS= read -r -d '' arg; do
		[ "$prev" = -address ] && [ "$arg" = "$SOCKET" ] && return 0
		prev=$arg
	done <"/proc/$1/cmdline"
	return 1
}
shims=()
killed=()
for dir in "$TASKS"/*/*/; do
	[ -f "$dir/init.pid" ] || continue
	id=$(basename "$dir")
	p=$(cat "$dir/init.pid" 2>/dev/null) || continue
	grep -qF "$id" "/proc/$p/cgroup" 2>/dev/null || continue
	parent=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
	shim_of_ours "$parent" && shims+=("$parent")
	log "killing container $id (pid $p) left behind"
	kill -KILL "$p" 2>/dev/null
	killed+=("$p")
done
for p in /proc/[0-9]*; do
	shim_of_ours "${p#/proc/}" && shims+=("${p#/proc/}")
done
for p in $(printf '%s\n' "${shims[@]}" | sort -u); do
	log "killing shim $p left behind"
	kill -KILL "$p" 2>/dev/null
done
# SIGKILL is delivered asynchronously: a cgroup keeps its process until it
# has exited, and remove_empty_pod_cgroups below can only remove empty
# ones. Wait (5 s at most) until the killed processes are gone.
for p in "${killed[@]}" "${shims[@]}"; do
	for _ in $(seq 50); do
		pid_running "$p" || break
		sleep 0.1
	done
	pid_running "$p" && log "pid $p still runs 5 s after SIGKILL: its cgroups stay"
done
# A killed shim leaves its socket in /run/containerd/s.
for b in "$TASKS"/*/*/bootstrap.json; do
	[ -f "$b" ] || continue
	s=$(sed -n 's|.*"address":"unix://\([^"]*\)".*|\1|p' "$b")
	case $s in /run/containerd/s/*) rm -f "$s" ;; esac
done

# 4. Mounts, pod cgroups, directories.
unmount_below "$E2E_RUN"
unmount_below "$E2E_ROOT"
remove_empty_pod_cgroups
made_run_containerd=0
[ -e "$E2E_RUN/.created-run-containerd" ] && made_run_containerd=1
rm -rf --one-file-system "$E2E_RUN" "$E2E_ROOT"
[ "$made_run_containerd" = 0 ] || rmdir /run/containerd/s /run/containerd 2>/dev/null
if [ "$PURGE" = 1 ]; then
	log "removing the build cache $E2E_CACHE"
	rm -rf --one-file-system "$E2E_CACHE"
fi
log "done"
exit 0
