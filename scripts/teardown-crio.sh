#!/usr/bin/env bash
# teardown-crio.sh - stops the test CRI-O (the one of scripts/setup-crio.sh
# or of the shared CI setup: both use $CRIO_RUN and $CRIO_ROOT) and removes
# what it left: its containers (through the runc root its config names),
# crio itself (by its recorded pid, never by name), conmon processes whose
# command line names its directories, mounts below them, empty pod cgroups
# and $CRIO_RUN. The imported images in $CRIO_ROOT stay unless --purge is
# given. Always exits 0 once it ran as root: it is called from cleanup paths.
set -uo pipefail
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib-setup.sh"

CRIO_ROOT=${CRIO_ROOT:-/var/lib/crio-e2e}
CRIO_RUN=${CRIO_RUN:-/run/crio-e2e}
PURGE=0
case ${1:-} in
--purge) PURGE=1 ;;
"") ;;
*) die "unknown argument $1 (usage: teardown-crio.sh [--purge])" ;;
esac
need_root
CONFIG=$CRIO_RUN/crio.conf
PIDFILE=$CRIO_RUN/crio.pid

# 1. Containers, killed and deleted through the runc root of this instance.
runc=
[ -f "$CONFIG" ] && runc=$(sed -n 's/^runtime_path = "\(.*\)"$/\1/p' "$CONFIG" | head -n 1)
if [ -n "$runc" ] && [ -x "$runc" ] && [ -d "$CRIO_RUN/runc" ]; then
	for id in $("$runc" --root "$CRIO_RUN/runc" list -q 2>/dev/null); do
		"$runc" --root "$CRIO_RUN/runc" kill "$id" KILL 2>/dev/null
		"$runc" --root "$CRIO_RUN/runc" delete --force "$id" 2>/dev/null && log "container $id deleted"
	done
fi

# 2. crio.
pid=
[ -s "$PIDFILE" ] && pid=$(cat "$PIDFILE")
stop_pid crio "$pid" 10
rm -f "$PIDFILE"

# 3. conmon processes of this instance: their arguments name its directories.
conmons=()
for p in /proc/[0-9]*; do
	[ -r "$p/cmdline" ] || continue
	argv=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
	case $argv in
	*conmon*" $CRIO_RUN/"* | *conmon*" $CRIO_ROOT/"*)
		log "killing conmon ${p#/proc/} left behind"
		kill -KILL "${p#/proc/}" 2>/dev/null
		conmons+=("${p#/proc/}")
		;;
	esac
done
# conmon runs in the pod's cgroup (conmon_cgroup = "pod"), which can only
# be removed once it has exited: SIGKILL is delivered asynchronously, so
# wait (5 s at most) until each is gone.
for p in "${conmons[@]}"; do
	for _ in $(seq 50); do
		pid_running "$p" || break
		sleep 0.1
	done
	pid_running "$p" && log "conmon $p still runs 5 s after SIGKILL: its pod cgroup stays"
done

# 4. Mounts, pod cgroups, directories.
unmount_below "$CRIO_RUN"
unmount_below "$CRIO_ROOT"
remove_empty_pod_cgroups
rm -rf --one-file-system "$CRIO_RUN" /var/log/crio-e2e
if [ "$PURGE" = 1 ]; then
	log "removing $CRIO_ROOT (the imported images)"
	rm -rf --one-file-system "$CRIO_ROOT"
fi
log "done"
exit 0
