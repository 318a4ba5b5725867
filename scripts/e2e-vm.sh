#!/usr/bin/env bash
# e2e-vm.sh - the suites on a production-shaped node (`make e2e-vm`, part of
# `make test`): a QEMU VM of Debian 12 with systemd as PID 1, cgroup v2,
# containerd with SystemdCgroup = true, CRI-O with cgroup_manager =
# "systemd", NRI on, a kubelet with cgroupDriver: systemd, on an emulated
# 2-socket SMT machine with two NUMA nodes:
#
#   8 vCPUs = 2 sockets x 2 cores x 2 threads; siblings 0-1 2-3 4-5 6-7;
#   L3 0-3 and 4-7; NUMA node0 = CPUs 0-3, node1 = CPUs 4-7, distance 20.
#
# This machine kind's /dev/kvm cannot boot a stock kernel, so the VM runs
# under TCG emulation (about 1/20-1/30 of the host's speed, both host cores
# while it runs). The steps:
#   1. the guest image: scripts/vm/build-image.sh (cached by recipe hash);
#   2. the host builds what the guest runs: the plugin, the test binaries
#      (go test -c -tags e2e of test/e2e and test/kubelet), containerd and
#      runc (scripts/setup-containerd.sh --artifacts), the kubelet
#      (scripts/setup-kube.sh), the busybox images; CRI-O comes from the
#      same place as on the host passes (lib-e2e.sh);
#   3. a payload disk (mkfs.ext4 -d) with those, the repository's scripts
#      and test directories, and scripts/vm/guest-suites.sh as its run.sh;
#   4. QEMU boots the image (through a throw-away qcow2 overlay, so the
#      cached image never changes), the guest runs the suites and powers
#      off; its output comes back on a serial port (a file here) and the
#      work dir on a results disk;
#   5. QEMU is killed on every exit path (trap); the exit status is the
#      guest's.
#
# What runs: VM_SUITES=subset (the default, what make test runs) runs the
# specs with the ginkgo label VM_LABEL ("vm") of both suites on both
# runtimes (listed before the boot); VM_SUITES=full runs both suites whole.
# VM_RUNTIMES ("containerd crio"); VM_TESTS ("e2e kubelet": the suites,
# test/e2e and test/kubelet; without kubelet no kubelet is built);
# VM_TIMEOUT (seconds for the guest, 3600); VM_STALL (seconds without the
# guest's one-a-minute heartbeat before it counts as frozen, 600); VM_KEEP=1
# keeps the run dir (serial output, console, results) also when it passed.
# VM_TESTS=bench (`make bench-vm`, on demand, never part of make test) runs
# the start-latency benchmark (test/bench/cmd/crilatency) on each runtime
# instead, with VM_BENCH_ARGS (default: 20 shared containers, 10 rounds of
# plugin off / direct / in-answer in rotating order); its tables are in the
# serial output and in the results' bench-RUNTIME.txt. Extra arguments go to
# both test binaries (after the label filter), e.g.
# scripts/e2e-vm.sh -ginkgo.focus=NUMA.
#
# One run at a time per machine: the VM holds /tmp/nri-cpualign-e2e.lock
# while it runs, like the host e2e runs (it takes both cores).
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
# shellcheck source=scripts/lib-kube.sh
source "$(dirname "$0")/lib-kube.sh"
check_prereqs

# The subset make test runs is the specs with the ginkgo label "vm", on
# each runtime: the topology specs only this VM's machine allows
# (test/e2e/topology_vm_test.go); daemon-reload and daemon-reexec keeping
# every cpuset with the runtime alone (test/e2e/systemd_reload_vm_test.go,
# also labelled vm-systemd); the kubelet with the plugin
# (test/kubelet/placement_test.go); daemon-reload, daemon-reexec and a
# kubelet restart keeping every cpuset and the exclusive pod's lifted quota
# under the kubelet (test/kubelet/systemd_vm_test.go); and the kubelet's own
# static policy on the same pods as the reference
# (test/kubelet/topology_vm_test.go). About 7-8 minutes per runtime here;
# the rest of the suites (VM_SUITES=full) would not fit in CI's 90 minutes
# beside the host passes.
VM_LABEL=${VM_LABEL:-vm}
VM_SUITES=${VM_SUITES:-subset}
VM_RUNTIMES=${VM_RUNTIMES:-containerd crio}
VM_TESTS=${VM_TESTS:-e2e kubelet}
VM_TIMEOUT=${VM_TIMEOUT:-3600}
case $VM_SUITES in
subset) filter=(-ginkgo.label-filter="$VM_LABEL") ;;
full) filter=() ;;
*) die "VM_SUITES=$VM_SUITES: want subset or full" ;;
esac
for rt in $VM_RUNTIMES; do
	case $rt in containerd | crio) ;; *) die "VM_RUNTIMES: unknown runtime $rt (containerd, crio)" ;; esac
done
for s in $VM_TESTS; do
	case $s in e2e | kubelet | bench) ;; *) die "VM_TESTS: unknown suite $s (e2e, kubelet, bench)" ;; esac
done

T0=$SECONDS
RUN=$(mktemp -d /tmp/nri-cpualign-vm.XXXXXX)
QEMU_PID=
status=1
cleanup() {
	local rc=$?
	[ "$rc" = 0 ] || status=$rc
	if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
		log "stopping QEMU (pid $QEMU_PID)"
		kill -TERM "$QEMU_PID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$QEMU_PID" 2>/dev/null || true
		wait "$QEMU_PID" 2>/dev/null || true
	fi
	if [ -n "${TAIL_PID:-}" ]; then kill "$TAIL_PID" 2>/dev/null || true; fi
	rm -rf "$RUN/payload" "$RUN/payload.img" "$RUN/root.qcow2"
	if [ "$status" = 0 ] && [ "${VM_KEEP:-0}" != 1 ]; then
		rm -rf "$RUN"
	else
		log "serial output, console and the guest's work dir kept in $RUN"
	fi
	log "e2e-vm finished in $((SECONDS - T0))s, status $status"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ 1. image
t=$SECONDS
IMAGE=$(bash "$REPO_ROOT/scripts/vm/build-image.sh" 9>&-) || die "building the guest image failed"
log "guest image ready in $((SECONDS - t))s: $IMAGE"

# ------------------------------------------------------------ 2. binaries
t=$SECONDS
build_plugin
log "building the test binaries"
for s in $VM_TESTS; do
	if [ "$s" = bench ]; then
		(cd "$REPO_ROOT" && go build -o "$RUN/crilatency" ./test/bench/cmd/crilatency) || die "building test/bench/cmd/crilatency failed"
		continue
	fi
	(cd "$REPO_ROOT" && go test -tags e2e -c -o "$RUN/$s.test" "./test/$s") || die "building test/$s failed"
done
artifacts=$(bash "$SETUP_SCRIPT" --artifacts 9>&-) || die "building containerd and runc failed"
eval "$artifacts"
[[ " $VM_TESTS " != *" kubelet "* ]] || setup_kube kubelet
CTRD_BIN=$(dirname "$E2E_RUNC")

if [ "$VM_SUITES" = subset ]; then
	log "VM_SUITES=subset: the specs labelled \"$VM_LABEL\", on each of $VM_RUNTIMES (VM_SUITES=full runs both suites whole):"
	for b in $VM_TESTS; do
		[ "$b" != bench ] || continue
		log "  test/$b: $("$RUN/$b.test" -ginkgo.dry-run -ginkgo.no-color "${filter[@]}" "$@" 2>/dev/null | grep -Eo 'Ran [0-9]+ of [0-9]+ Specs' || echo '?')"
		"$RUN/$b.test" -ginkgo.dry-run -ginkgo.v -ginkgo.no-color "${filter[@]}" "$@" 2>/dev/null |
			grep -E "^[^ ].*\\[([^]]*, )?$VM_LABEL(, [^]]*)?\\]\$" | sed 's/^/      /' >&2 || true
	done
else
	log "VM_SUITES=full: both suites whole"
fi

# ------------------------------------------------------------ 3. payload
P=$RUN/payload
mkdir -p "$P/bin" "$P/cache/bin/$(basename "$CTRD_BIN")" "$P/cache/bin/kube" "$P/cache/images" "$P/cache/crio" "$P/repo"
cp "$PLUGIN_BIN" "$P/bin/"
find "$RUN" -maxdepth 1 \( -name '*.test' -o -name crilatency \) -exec cp -t "$P/bin/" {} +
cp "$CTRD_BIN"/{containerd,ctr,containerd-shim-runc-v2,runc} "$P/cache/bin/$(basename "$CTRD_BIN")/"
cp "$E2E_TEST_IMAGE_ARCHIVE" "$E2E_PAUSE_IMAGE_ARCHIVE" "$P/cache/images/"
[ -z "${E2E_KUBE_BIN:-}" ] || cp "$E2E_KUBE_BIN/kubelet" "$P/cache/bin/kube/"
if [[ " $VM_RUNTIMES " == *" crio "* ]]; then
	# CRI-O as the host passes get it (lib-e2e.sh): the shared CI setup's
	# build, else a crio in PATH.
	if [ -f "$SHARED_E2E/crio/crio.xz" ]; then
		want_cmd xz xz-utils
		install_wanted
		for b in crio pinns; do xz -dc "$SHARED_E2E/crio/$b.xz" >"$P/cache/crio/$b"; done
	elif crio=$(command -v "${CRIO_BIN:-crio}"); then
		cp "$crio" "$P/cache/crio/crio"
		cp "$(dirname "$crio")/pinns" "$P/cache/crio/pinns" 2>/dev/null || cp "$(command -v pinns)" "$P/cache/crio/pinns" ||
			die "no pinns beside $crio or in PATH"
	else
		die "VM_RUNTIMES names crio, but $CRIO_MISSING"
	fi
	chmod 755 "$P/cache/crio/"*
fi
# The repository's scripts and the suites' directories (the test binaries
# run in their package directory and read files of the repository).
(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard 2>/dev/null || find . -path ./.git -prune -o -type f -print0) |
	(cd "$REPO_ROOT" && grep -zv '^bin/' | xargs -0 cp --parents -t "$P/repo")
install -m 755 "$REPO_ROOT/scripts/vm/guest-suites.sh" "$P/run.sh"
{
	echo "VM_RUNTIMES='$VM_RUNTIMES'"
	echo "VM_SUITES_RUN='$VM_TESTS'"
	VM_E2E_ARGS=("${filter[@]}" "$@")
	VM_KUBELET_ARGS=("${filter[@]}" "$@")
	read -ra VM_BENCH_ARGS <<<"${VM_BENCH_ARGS:--shared 20 -n 10 -block 1 -settle 120s}"
	declare -p VM_E2E_ARGS VM_KUBELET_ARGS VM_BENCH_ARGS
} >"$P/vm.env"
size_mb=$(($(du -sm "$P" | cut -f1) * 5 / 4 + 64))
truncate -s "${size_mb}M" "$RUN/payload.img"
mkfs.ext4 -q -F -L payload -d "$P" "$RUN/payload.img" || die "mkfs.ext4 -d of the payload failed"
rm -rf "$P"
truncate -s 2G "$RUN/results.img"
qemu-img create -q -f qcow2 -b "$IMAGE/root.img" -F raw "$RUN/root.qcow2" || die "qemu-img create of the overlay failed"
log "binaries and payload (${size_mb} MB) ready in $((SECONDS - t))s"

# ------------------------------------------------------------ 4. boot
take_machine
t=$SECONDS
log "booting the VM (TCG, 8 vCPUs in 2 sockets x 2 cores x 2 threads, 2 NUMA nodes); serial output $RUN/serial.out"
# tb-size=256: a smaller translation cache for TCG (QEMU's RSS 0.9 GB
# instead of 1.9-2.4 GB), as the machine is shared with the host suites.
qemu-system-x86_64 -name nri-cpualign-vm -machine q35 -accel tcg,thread=multi,tb-size=256 \
	-cpu max,vendor=GenuineIntel -smp 8,sockets=2,cores=2,threads=2 -m 6G \
	-object memory-backend-ram,id=m0,size=3G -object memory-backend-ram,id=m1,size=3G \
	-numa node,nodeid=0,memdev=m0 -numa node,nodeid=1,memdev=m1 \
	-numa cpu,node-id=0,socket-id=0 -numa cpu,node-id=1,socket-id=1 \
	-numa dist,src=0,dst=1,val=20 \
	-kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
	-append "root=/dev/vda rw console=ttyS0,115200 panic=-1 quiet" \
	-drive "file=$RUN/root.qcow2,format=qcow2,if=virtio,cache=unsafe" \
	-drive "file=$RUN/payload.img,format=raw,if=virtio,readonly=on" \
	-drive "file=$RUN/results.img,format=raw,if=virtio" \
	-display none -vga none -nic none -device virtio-rng-pci -no-reboot \
	-serial "file:$RUN/console.log" -serial "file:$RUN/serial.out" \
	</dev/null >"$RUN/qemu.log" 2>&1 9>&- &
QEMU_PID=$!
# The guest's output as it comes.
touch "$RUN/serial.out"
tail -n +1 -f --pid="$QEMU_PID" "$RUN/serial.out" 9>&- &
TAIL_PID=$!

# Wait for the guest's last line, or QEMU's exit (a guest whose serial
# port stopped powers off by itself and leaves its status on the results
# disk), or the time limit. The guest's heartbeat (a kernel log line on the
# console every minute, scripts/vm/guest-suites.sh) tells a guest that is
# alive from one that froze: VM_STALL seconds without one end the run.
deadline=$((SECONDS + VM_TIMEOUT))
VM_STALL=${VM_STALL:-600}
beat=$SECONDS beats=0
while kill -0 "$QEMU_PID" 2>/dev/null && ! grep -q '^NRI-VM-END' "$RUN/serial.out"; do
	[ "$SECONDS" -lt "$deadline" ] || { tail -n 5 "$RUN/console.log" >&2; log "ERROR: the guest did not finish within VM_TIMEOUT=${VM_TIMEOUT}s (console above)"; exit 1; }
	n=$(grep -ac 'nri-vm heartbeat' "$RUN/console.log" 2>/dev/null || true)
	[ "$n" = "$beats" ] || { beats=$n beat=$SECONDS; }
	if grep -q '^NRI-VM-BEGIN' "$RUN/serial.out" && [ $((SECONDS - beat)) -ge "$VM_STALL" ]; then
		tail -n 5 "$RUN/console.log" >&2
		log "ERROR: the guest froze: no heartbeat on its console for ${VM_STALL}s (VM_STALL; last ones above)"
		exit 1
	fi
	sleep 2
done
end=$(grep -a '^NRI-VM-END' "$RUN/serial.out" | tail -n 1 || true)
# The guest synced the results disk before its last line and powers off by
# itself, which can take a minute (udev workers); QEMU gets 10 s, then the
# trap stops it: nothing of the guest is kept but the results disk.
for _ in $(seq 20); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.5; done
kill "$TAIL_PID" 2>/dev/null || true
wait "$TAIL_PID" 2>/dev/null || true
mkdir -p "$RUN/results"
tar -C "$RUN/results" -xf "$RUN/results.img" 2>/dev/null || log "no results archive on the results disk"
rm -f "$RUN/results.img"
if [ -n "$end" ]; then
	log "guest finished after $((SECONDS - t))s: $end"
	rc=$(sed -n 's/^NRI-VM-END rc=\([0-9]*\).*/\1/p' <<<"$end")
elif [ -f "$RUN/results/vm-rc" ]; then
	# The serial port stopped taking the guest's output; the whole of it is
	# on the results disk.
	log "the guest's serial port stopped; its output from the results disk (the serial output above ends early):"
	cat "$RUN/results/vm-output.log" >&2
	rc=$(cat "$RUN/results/vm-rc")
	log "guest finished after $((SECONDS - t))s with status $rc, its serial output cut short ($(grep -ac 'serial port did not take' "$RUN/console.log" || true) notice on the console)"
else
	tail -n 30 "$RUN/console.log" >&2
	die "QEMU exited before the guest finished (qemu log: $(cat "$RUN/qemu.log")); console above"
fi
out=$RUN/serial.out
[ -z "$end" ] && out=$RUN/results/vm-output.log
grep -aE '^\[run [0-9:]+\] ((e2e|kubelet|bench) on .*: exit|suites finished|.*setup failed)' "$out" | sed 's/^/  /' >&2 || true
status=${rc:-1}
