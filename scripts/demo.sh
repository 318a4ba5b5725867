#!/usr/bin/env bash
# demo.sh - `make demo`: start the test containerd (scripts/setup-containerd.sh,
# built on first use), build and start nri-cpualign in the background, run
# three demo pods (Guaranteed 1-CPU, Burstable, BestEffort) and print where
# each container runs, read back from inside the containers. Everything stays
# running; `make demo-down` removes it.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
check_prereqs

# Do not race an e2e run on the same containerd.
exec 9>/tmp/nri-cpualign-e2e.lock
if ! flock -n 9; then
	log "an e2e run holds /tmp/nri-cpualign-e2e.lock, waiting for it"
	flock 9
fi

stop_demo_plugin
setup_containerd
build_plugin
(cd "$REPO_ROOT" && go build -o "$DEMO_TOOL" ./test/e2e/cmd/demo) || die "build of the demo tool failed"
"$DEMO_TOOL" down # pods of an earlier demo

mkdir -p "$DEMO_RUN"
rm -rf "$DEMO_RUN/state"
reserved=$(cut -d, -f1 /sys/devices/system/cpu/online | cut -d- -f1)
cat >"$DEMO_RUN/config.toml" <<CONF
# nri-cpualign demo: the kubelet's static CPU manager with CPU $reserved reserved
cpu_manager_policy = "static"
reserved_system_cpus = "$reserved"
topology_manager_policy = "best-effort"
state_dir = "$DEMO_RUN/state"
socket_path = "$NRI_SOCKET"
metrics_address = ""
log_level = "info"
CONF

log "starting nri-cpualign (log: $DEMO_RUN/plugin.log)"
offset=$(stat -c %s "$E2E_CONTAINERD_LOG")
# 9>&-: the plugin must not keep the lock fd (it would block every e2e run).
setsid "$PLUGIN_BIN" run --config "$DEMO_RUN/config.toml" >>"$DEMO_RUN/plugin.log" 2>&1 </dev/null 9>&- &
echo $! >"$DEMO_PIDFILE"
for i in $(seq 200); do
	grep -q '90-cpualign.*connected and synchronized' < <(tail -c +"$((offset + 1))" "$E2E_CONTAINERD_LOG") && break
	demo_plugin_running || { tail -n 30 "$DEMO_RUN/plugin.log" >&2; die "nri-cpualign exited during start"; }
	[ "$i" -lt 200 ] || { tail -n 30 "$DEMO_RUN/plugin.log" >&2; die "nri-cpualign did not connect to containerd within 20s"; }
	sleep 0.1
done
log "nri-cpualign connected (pid $(cat "$DEMO_PIDFILE"))"

echo
echo "Demo pods on $(nproc) CPUs, CPU $reserved reserved for the system; CPUS read from /proc/1/status inside each container:"
echo
"$DEMO_TOOL" up
echo
echo "The Guaranteed 1-CPU container has a CPU to itself; the others share the rest."
echo "Plugin log: $DEMO_RUN/plugin.log   containerd log: $E2E_CONTAINERD_LOG"
echo "Everything keeps running. Stop it with:  make demo-down"
