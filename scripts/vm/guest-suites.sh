#!/usr/bin/env bash
# guest-suites.sh - runs inside the VM test node (scripts/e2e-vm.sh puts it
# on the payload disk as run.sh): the real-runtime suite (test/e2e) and the
# kubelet suite (test/kubelet), each on containerd (SystemdCgroup = true)
# and on CRI-O (cgroup_manager = "systemd"), with NRI on and cgroup v2. The
# runtimes are set up by the project's own scripts from the payload's copy
# of the repository, with the binaries built on the host (the payload's
# cache); nothing is built here. Output: stdout (the host's serial file),
# copied from a file (see "never write to the serial port themselves" below); the work
# dir (plugin, runtime and kubelet logs, junit reports, the whole output as
# vm-output.log and the exit status as vm-rc) goes as a tar archive onto
# the results disk (/dev/vdc). Exit status: 0 when every suite passed.
#
# Reads $PAYLOAD/vm.env: VM_RUNTIMES, VM_SUITES_RUN (e2e kubelet, or
# bench: the start-latency benchmark test/bench/cmd/crilatency),
# VM_E2E_ARGS and VM_KUBELET_ARGS (the test binaries' ginkgo arguments),
# VM_BENCH_ARGS (crilatency's flags).
set -euo pipefail
PAYLOAD=/mnt/payload
# A systemd unit runs this without a login environment.
export HOME=${HOME:-/root} PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORK=/var/tmp/nri-vm-work
OUT=/var/tmp/nri-vm-output.log

# The suites never write to the serial port themselves. A tty write blocks
# while the UART's transmit buffer is full, and an emulated UART that misses
# one transmit interrupt stops draining it: the suites, ginkgo's own timeout
# reports included, would then stop dead with no trace. So the suites write
# to a file, a streamer copies it to the serial port (our stdout) for the
# host to follow, and the exit status and the whole output go onto the
# results disk, which the host reads whether or not the serial port kept
# up. A heartbeat in the kernel log (the console, written by polling, not by
# interrupts) shows the host that the guest is alive and how far the output
# got.
if [ -z "${NRI_VM_DETACHED:-}" ]; then
	rm -rf "$WORK" && mkdir -p "$WORK"
	: >"$OUT"
	rm -f "$OUT.done"
	(
		pos=0
		while :; do
			size=$(stat -c %s "$OUT")
			if [ "$size" -gt "$pos" ]; then
				# (head stops tail early when the file grew meanwhile)
				tail -c +$((pos + 1)) "$OUT" 2>/dev/null | head -c $((size - pos)) || true
				pos=$size
			elif [ -e "$OUT.done" ]; then
				break
			fi
			sleep 1
		done
	) &
	streamer=$!
	(
		while sleep 60; do
			echo "<3>nri-vm heartbeat: output $(stat -c %s "$OUT") bytes, load $(cut -d' ' -f1-3 /proc/loadavg)" >/dev/kmsg
		done
	) &
	heartbeat=$!
	rc=0
	NRI_VM_DETACHED=1 "$0" "$@" >"$OUT" 2>&1 </dev/null || rc=$?
	kill "$heartbeat" 2>/dev/null || true
	touch "$OUT.done"
	# The streamer gets a minute to catch up; one that cannot has a stuck
	# serial port, and the host reads the output from the results disk.
	drained=0
	for _ in $(seq 60); do
		kill -0 "$streamer" 2>/dev/null || { drained=1; break; }
		sleep 1
	done
	[ "$drained" = 1 ] || echo "<3>nri-vm: the serial port did not take the output; it is on the results disk" >/dev/kmsg
	cp "$OUT" "$WORK/vm-output.log"
	echo "$rc" >"$WORK/vm-rc"
	# The work dir for the host: a plain tar stream on the raw results disk.
	tar -C "$WORK" -cf /dev/vdc . 2>/dev/null || echo "<3>nri-vm: cannot write the results disk" >/dev/kmsg
	sync
	if [ "$drained" != 1 ]; then
		# nri-vm-run's last line would block on the same port: power off
		# here; the host takes the status from the results disk.
		kill "$streamer" 2>/dev/null || true
		systemctl poweroff --no-block
	fi
	exit "$rc"
fi
REPO=$PAYLOAD/repo
# shellcheck source=/dev/null
source "$PAYLOAD/vm.env"
# The e2e cache as the setup scripts know it, filled from the payload: the
# binary directories linked (read-only), the image archives copied (a
# guest whose busybox differs from the host's makes its own beside them).
export E2E_CACHE=/var/cache/nri-e2e E2E_SKIP_APT=1 E2E_CGROUP_DRIVER=systemd
mkdir -p "$E2E_CACHE/bin" "$E2E_CACHE/images"
for d in "$PAYLOAD"/cache/bin/*; do ln -sfn "$d" "$E2E_CACHE/bin/"; done
cp "$PAYLOAD"/cache/images/*.tar "$E2E_CACHE/images/"
# CRI-O from the payload (scripts/setup-crio.sh takes CRIO_BIN); the shared
# CI setup is a cgroupfs one, so it is not looked for here.
export CRIO_BIN=$PAYLOAD/cache/crio/crio PINNS_BIN=$PAYLOAD/cache/crio/pinns SHARED_E2E=/nonexistent
# shellcheck source=scripts/lib-e2e.sh
source "$REPO/scripts/lib-e2e.sh"
# shellcheck source=scripts/lib-kube.sh
source "$REPO/scripts/lib-kube.sh"
export PLUGIN_BIN=$PAYLOAD/bin/nri-cpualign
PIDFILE=$WORK/pids
export E2E_KUBE_BIN=$E2E_CACHE/bin/kube
T0=$SECONDS

log "guest: $(uname -r), systemd $(systemctl --version | head -n 1 | cut -d' ' -f2), cgroup $(stat -fc %T /sys/fs/cgroup), $(nproc) CPUs"
for c in /sys/devices/system/cpu/cpu[0-9]*; do
	printf '  %s: core siblings %s, L3 %s, node %s\n' "${c##*/}" "$(cat "$c/topology/thread_siblings_list")" \
		"$(cat "$c/cache/index3/shared_cpu_list" 2>/dev/null || echo -)" "$(basename "$(ls -d "$c"/node* 2>/dev/null | head -n 1)" 2>/dev/null)"
done
log "boot finished after $(cut -d' ' -f1 /proc/uptime)s of uptime ($(systemd-analyze time 2>/dev/null | head -n 1))"
# systemd turns the cpuset controller off in the root cgroup while no unit
# asks for it, and the kubelet then refuses to start ("cgroup [kubepods]
# has some missing controllers: cpuset"); a node's kubelet unit usually
# has it turned on by another unit. A runtime property that asks for it:
systemctl set-property --runtime system.slice "AllowedCPUs=0-$(($(nproc) - 1))" ||
	log "systemctl set-property system.slice AllowedCPUs failed"
# systemctl returns once systemd has taken the property; it turns the
# controller on in the root cgroup when it realizes the slice's cgroup,
# which it may do a moment later: wait for that, the kubelet's condition.
for ((i = 0; i < 300; i++)); do
	grep -qw cpuset /sys/fs/cgroup/cgroup.subtree_control && break
	sleep 0.1
done
grep -qw cpuset /sys/fs/cgroup/cgroup.subtree_control ||
	log "systemd did not turn the cpuset controller on in /sys/fs/cgroup/cgroup.subtree_control within 30 s: the kubelet will refuse to start"

status=0
summary=()
run() { # NAME CMD...: one suite run, its result into status and summary
	local name=$1 t0=$SECONDS rc=0
	shift
	log "=== $name"
	"$@" || rc=$?
	summary+=("$name: exit $rc in $((SECONDS - t0))s")
	[ "$rc" = 0 ] || status=$rc
}

suite_e2e() { # RUNTIME ENVFILE
	(
		# shellcheck source=/dev/null
		source "$2"
		export E2E_RUNTIME=$1 NRI_CPUALIGN_BIN=$PLUGIN_BIN NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE E2E_WORK_DIR=$WORK/e2e-$1
		[ "$1" = crio ] && export E2E_CRIO_SETUP_SCRIPT=$CRIO_SETUP_SCRIPT
		mkdir -p "$E2E_WORK_DIR"
		cd "$REPO/test/e2e" &&
			"$PAYLOAD/bin/e2e.test" -test.v -test.timeout 60m -ginkgo.v -ginkgo.no-color \
				-ginkgo.junit-report="$WORK/junit-e2e-$1.xml" "${VM_E2E_ARGS[@]}"
	)
}

suite_kubelet() { # RUNTIME ENVFILE
	(
		# shellcheck source=/dev/null
		source "$2"
		export E2E_RUNTIME=$1 NRI_CPUALIGN_BIN=$PLUGIN_BIN NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE E2E_WORK_DIR=$WORK/kubelet
		cd "$REPO/test/kubelet" &&
			"$PAYLOAD/bin/kubelet.test" -test.v -test.timeout 60m -ginkgo.v -ginkgo.no-color \
				-ginkgo.junit-report="$WORK/junit-kubelet-$1.xml" "${VM_KUBELET_ARGS[@]}"
	)
}

suite_bench() { # RUNTIME ENVFILE
	(
		# shellcheck source=/dev/null
		source "$2"
		export E2E_RUNTIME=$1 NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE
		"$PAYLOAD/bin/crilatency" -bin "$PLUGIN_BIN" -work "$WORK/bench-$1" "${VM_BENCH_ARGS[@]}" | tee "$WORK/bench-$1.txt"
	)
}

for rt in $VM_RUNTIMES; do
	envfile=$(runtime_setup "$rt") || { status=1; summary+=("$rt: setup failed"); continue; }
	for s in $VM_SUITES_RUN; do
		run "$s on $rt" "suite_$s" "$rt" "$envfile"
		kill_pids_of_bin "$PIDFILE" "$E2E_KUBE_BIN/kubelet"
		kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
	done
	cp "$(dirname "$envfile")"/*.log "$WORK/" 2>/dev/null || true
	runtime_teardown "$rt"
done

for l in "${summary[@]}"; do log "$l"; done
log "suites finished in $((SECONDS - T0))s, status $status"
exit "$status"
