# shellcheck shell=bash
# A one-node Kubernetes control plane on the loopback for scripts/e2e-cluster.sh:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet
# registered as a node, against the test containerd or CRI-O. Sourced after
# lib-e2e.sh, not run.
#
# Everything listens on 127.0.0.1 and keeps its data under $CLUSTER_DIR (a
# temporary directory); the pid of every process goes to $CLUSTER_RUN, a
# fixed directory, so that a run killed before its cleanup is cleaned up by
# the next one.

CLUSTER_RUN=${CLUSTER_RUN:-/run/nri-cpualign-cluster}
# The node's name is its address, as hack/local-up-cluster.sh does it: the
# kubelet refuses a loopback --node-ip but takes an IP given as the hostname
# for the node's InternalIP, which the API server then reaches it on.
CLUSTER_NODE=${CLUSTER_NODE:-127.0.0.1}
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
APISERVER_PORT=${APISERVER_PORT:-16443}
KUBELET_PORT=${KUBELET_PORT:-10250}
KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-10248}
KCM_PORT=${KCM_PORT:-10257}
SCHEDULER_PORT=${SCHEDULER_PORT:-10259}
# The order cluster_stop stops them in: the kubelet first while the API
# server still answers, etcd last.
CLUSTER_PROCS=(kubelet kube-scheduler kube-controller-manager kube-apiserver etcd)

# kube_binaries builds (first run only: minutes each) or finds the
# Kubernetes binaries in the e2e cache and sets E2E_KUBE_BIN.
kube_binaries() {
	local t0=$SECONDS out
	log "Kubernetes binaries ($KUBE_SETUP_SCRIPT)"
	out=$(bash "$KUBE_SETUP_SCRIPT" kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl etcd 9>&-) ||
		die "setup-kube.sh failed"
	eval "$out"
	log "Kubernetes $E2E_KUBE_VERSION binaries ready in $((SECONDS - t0))s ($E2E_KUBE_BIN)"
}

# proc_alive NAME: the process recorded for NAME runs and is the binary we
# started (a reused pid is left alone); zombies count as gone.
proc_alive() {
	local pid
	[ -s "$CLUSTER_RUN/$1.pid" ] || return 1
	pid=$(cat "$CLUSTER_RUN/$1.pid")
	[ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$E2E_KUBE_BIN/$1")" ] &&
		! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# start_proc NAME ARGS...: starts $E2E_KUBE_BIN/NAME in its own session (so
# a Ctrl-C reaches only this script, whose cleanup stops it in order),
# without the lock fd, logging to $CLUSTER_DIR/logs/NAME.log.
start_proc() {
	local name=$1
	shift
	setsid "$E2E_KUBE_BIN/$name" "$@" >>"$CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$CLUSTER_RUN/$name.pid"
}

# stop_proc NAME: SIGTERM, SIGKILL after 10 s; returns once it has exited
# (5 s more at most).
stop_proc() {
	local name=$1 pid i
	proc_alive "$name" || { rm -f "$CLUSTER_RUN/$name.pid"; return 0; }
	pid=$(cat "$CLUSTER_RUN/$name.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 100); do proc_alive "$name" || break; sleep 0.1; done
	if proc_alive "$name"; then
		log "$name (pid $pid) ignored SIGTERM for 10s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		# Delivered asynchronously: until it has exited it holds its
		# ports, which the next runtime's cluster binds again.
		for i in $(seq 50); do proc_alive "$name" || break; sleep 0.1; done
		proc_alive "$name" && log "$name (pid $pid) still runs 5 s after SIGKILL"
	fi
	rm -f "$CLUSTER_RUN/$name.pid"
}

# wait_for WHAT TIMEOUT CMD...: polls CMD every 0.2 s until it succeeds;
# dies with the tail of WHAT's log when its process exits or time runs out.
wait_for() {
	local what=$1 timeout=$2 deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ! proc_alive "$what"; then
			tail -n 40 "$CLUSTER_DIR/logs/$what.log" >&2
			die "$what exited"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 40 "$CLUSTER_DIR/logs/$what.log" >&2
			die "$what not ready in ${timeout}s"
		fi
		sleep 0.2
	done
}

CRIO_RUN=${CRIO_RUN:-/run/crio-e2e}

# cluster_setup_runtime RUNTIME starts the test containerd or CRI-O and
# loads its environment; RUNTIME_LOG is its log, CNI_CONF_DIR the network
# configuration directory it watches.
cluster_setup_runtime() {
	local t0=$SECONDS conf root runroot
	unset E2E_RUNTIME E2E_CONTAINERD_LOG E2E_CRIO_LOG E2E_CRIO_STORE
	case $1 in
	containerd)
		setup_containerd
		RUNTIME_LOG=$E2E_CONTAINERD_LOG
		CNI_CONF_DIR=$E2E_RUN/cni/net.d
		;;
	crio)
		cluster_hugetlb_mount
		check_crio_prereqs
		log "setting up CRI-O ($CRIO_SETUP_SCRIPT)"
		bash "$CRIO_SETUP_SCRIPT" >/dev/null 9>&- || die "CRI-O setup failed"
		# shellcheck disable=SC1091
		source "$CRIO_RUN/env"
		RUNTIME_LOG=$E2E_CRIO_LOG
		conf=$E2E_CRIO_CONFIG
		CNI_CONF_DIR=$(sed -n 's/^network_dir = "\(.*\)"$/\1/p' "$conf")
		root=$(sed -n 's/^root = "\(.*\)"$/\1/p' "$conf")
		runroot=$(sed -n 's/^runroot = "\(.*\)"$/\1/p' "$conf")
		[ -n "$CNI_CONF_DIR" ] && [ -n "$root" ] && [ -n "$runroot" ] ||
			die "$conf: no network_dir, root or runroot"
		# The store skopeo imports the image into (containers-storage:[STORE]NAME).
		export E2E_CRIO_STORE="overlay@$root+$runroot"
		log "CRI-O ready in $((SECONDS - t0))s (pid $E2E_CRIO_PID, NRI socket $NRI_SOCKET)"
		;;
	esac
}

# cluster_teardown_runtime RUNTIME stops it (the teardown scripts kill
# leftover containers and remove empty kubepods cgroups).
cluster_teardown_runtime() {
	case $1 in
	containerd) teardown_containerd ;;
	crio)
		teardown_crio
		cluster_hugetlb_umount
		;;
	esac
}

# CRI-O sets the kubelet's hugepage limits on every container when
# /proc/cgroups lists the hugetlb controller as enabled; on a cgroup v1 host
# that does not mount its hierarchy (this VM) runc then fails every
# container. cluster_hugetlb_mount mounts it for the run (and notes so in
# $CLUSTER_RUN, so that an interrupted run's successor unmounts it).
HUGETLB_MNT=/sys/fs/cgroup/hugetlb
cluster_hugetlb_mount() {
	[ -d /sys/fs/cgroup/cpuset ] || return 0 # cgroup v2: nothing to do
	mountpoint -q "$HUGETLB_MNT" 2>/dev/null && return 0
	awk '$1 == "hugetlb" && $4 == 1 {found = 1} END {exit !found}' /proc/cgroups || return 0
	log "mounting the hugetlb cgroup hierarchy at $HUGETLB_MNT for CRI-O (unmounted at the end)"
	mkdir -p "$CLUSTER_RUN" "$HUGETLB_MNT"
	mount -t cgroup -o hugetlb hugetlb "$HUGETLB_MNT" || die "cannot mount the hugetlb cgroup hierarchy at $HUGETLB_MNT"
	touch "$CLUSTER_RUN/hugetlb-mounted"
}

# cluster_hugetlb_umount removes the empty pod cgroups in the hierarchy
# cluster_hugetlb_mount mounted, and unmounts it.
cluster_hugetlb_umount() {
	[ -e "$CLUSTER_RUN/hugetlb-mounted" ] || return 0
	if [ -d "$HUGETLB_MNT/kubepods" ]; then
		find "$HUGETLB_MNT/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || log "some hugetlb cgroups are still in use"
	fi
	if umount "$HUGETLB_MNT"; then
		rmdir "$HUGETLB_MNT" 2>/dev/null || true
		rm -f "$CLUSTER_RUN/hugetlb-mounted"
	else
		log "cannot unmount $HUGETLB_MNT"
	fi
}

# cluster_certs writes a CA, the serving and client certificates, the
# service-account key pair and one kubeconfig per client into
# $CLUSTER_DIR/pki (ECDSA P-256: fast to make, accepted everywhere).
cluster_certs() {
	local d=$CLUSTER_DIR/pki
	mkdir -p "$d"
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj /CN=nri-cpualign-e2e-ca -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null || die "openssl: CA"
	# name subject extendedKeyUsage [subjectAltName]
	mkcert() {
		local name=$1 subj=$2 eku=$3 san=${4:-}
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-subj "$subj" -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null || die "openssl: $name key"
		{
			echo "basicConstraints=critical,CA:FALSE"
			echo "keyUsage=critical,digitalSignature,keyEncipherment"
			echo "extendedKeyUsage=$eku"
			[ -z "$san" ] || echo "subjectAltName=$san"
		} >"$d/$name.ext"
		openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
			-extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null || die "openssl: $name certificate"
	}
	mkcert apiserver /CN=kube-apiserver serverAuth \
		"IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	mkcert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	mkcert kubelet-serving "/CN=$CLUSTER_NODE" serverAuth "IP:$CLUSTER_NODE"
	mkcert admin "/O=system:masters/CN=nri-cpualign-e2e-admin" clientAuth
	mkcert kube-controller-manager /CN=system:kube-controller-manager clientAuth
	mkcert kube-scheduler /CN=system:kube-scheduler clientAuth
	mkcert kubelet "/O=system:nodes/CN=system:node:$CLUSTER_NODE" clientAuth
	openssl ecparam -name prime256v1 -genkey -noout -out "$d/sa.key" 2>/dev/null || die "openssl: service-account key"
	openssl ec -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null || die "openssl: service-account public key"
	local who
	for who in admin kube-controller-manager kube-scheduler kubelet; do
		cat >"$CLUSTER_DIR/$who.kubeconfig" <<-EOF
			apiVersion: v1
			kind: Config
			clusters:
			- name: e2e
			  cluster:
			    server: https://127.0.0.1:$APISERVER_PORT
			    certificate-authority: $d/ca.crt
			users:
			- name: $who
			  user:
			    client-certificate: $d/$who.crt
			    client-key: $d/$who.key
			contexts:
			- name: e2e
			  context:
			    cluster: e2e
			    user: $who
			current-context: e2e
		EOF
	done
}

# cluster_cni_placeholder gives the runtime a network configuration so that
# it reports NetworkReady and the kubelet marks the node Ready. No CNI
# plugin ever runs: every pod of these tests uses the host network, for
# which the runtime calls no CNI plugin.
cluster_cni_placeholder() {
	mkdir -p "$CNI_CONF_DIR"
	cat >"$CNI_CONF_DIR/10-nri-cpualign-e2e.conflist" <<-'EOF'
		{"cniVersion": "1.0.0", "name": "nri-cpualign-e2e-host-network-only", "plugins": [{"type": "loopback"}]}
	EOF
}

# cluster_kubelet_config writes the kubelet's configuration: this machine's
# needs (cgroupfs, cgroup v1, swap), the CPU, topology and memory managers
# at none/None as deploy/node/kubelet-cpualign.conf sets them, no CPU
# reservation (the plugin's ConfigMap reserves one), x509 clients only.
cluster_kubelet_config() {
	cat >"$CLUSTER_DIR/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		cgroupDriver: cgroupfs
		failCgroupV1: false
		failSwapOn: false
		cpuManagerPolicy: none
		topologyManagerPolicy: none
		memoryManagerPolicy: None
		containerRuntimeEndpoint: $CRI_RUNTIME_ENDPOINT
		address: 127.0.0.1
		port: $KUBELET_PORT
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: $KUBELET_HEALTHZ_PORT
		tlsCertFile: $CLUSTER_DIR/pki/kubelet-serving.crt
		tlsPrivateKeyFile: $CLUSTER_DIR/pki/kubelet-serving.key
		authentication:
		  anonymous:
		    enabled: false
		  webhook:
		    enabled: false
		  x509:
		    clientCAFile: $CLUSTER_DIR/pki/ca.crt
		authorization:
		  mode: AlwaysAllow
		podLogsDir: $CLUSTER_DIR/pod-logs
		cgroupsPerQOS: true
		enforceNodeAllocatable: []
		evictionHard:
		  memory.available: "1Mi"
		  nodefs.available: "1%"
		  imagefs.available: "1%"
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		serializeImagePulls: false
		localStorageCapacityIsolation: false
		nodeStatusUpdateFrequency: 2s
		syncFrequency: 10s
	EOF
}

# cluster_start starts the five processes and waits until the API server
# is ready, the controller manager and the scheduler are healthy and the
# node is registered; the suite waits for it to be Ready.
cluster_start() {
	local d=$CLUSTER_DIR pki=$CLUSTER_DIR/pki kubectl=$E2E_KUBE_BIN/kubectl t0=$SECONDS
	mkdir -p "$CLUSTER_RUN" "$d/logs" "$d/etcd" "$d/kubelet" "$d/pod-logs"
	echo "$d" >"$CLUSTER_RUN/dir"

	start_proc etcd --name e2e --data-dir "$d/etcd" --unsafe-no-fsync \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn

	start_proc kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --advertise-address 127.0.0.1 \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
		--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
		--service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
		--authorization-mode Node,RBAC --allow-privileged=true --enable-priority-and-fairness=false \
		--profiling=false --endpoint-reconciler-type none
	wait_for etcd 30 "$kubectl" --kubeconfig "$d/admin.kubeconfig" get --raw /readyz
	wait_for kube-apiserver 60 "$kubectl" --kubeconfig "$d/admin.kubeconfig" get --raw /readyz
	log "API server ready on https://127.0.0.1:$APISERVER_PORT in $((SECONDS - t0))s"

	start_proc kube-controller-manager --kubeconfig "$d/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig "$d/kube-controller-manager.kubeconfig" --authorization-kubeconfig "$d/kube-controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" --use-service-account-credentials \
		--profiling=false
	start_proc kube-scheduler --kubeconfig "$d/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig "$d/kube-scheduler.kubeconfig" --authorization-kubeconfig "$d/kube-scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false

	# Both serve /healthz without credentials (an always-allowed path) on
	# their own self-signed certificates. Healthy means their controllers
	# run; what a spec needs of one (a namespace's service account, the
	# node's not-ready taint gone) the suite waits for by name.
	wait_for kube-controller-manager 60 curl -skf --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz"
	wait_for kube-scheduler 60 curl -skf --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz"

	cluster_kubelet_config
	start_proc kubelet --config "$d/kubelet.yaml" --kubeconfig "$d/kubelet.kubeconfig" --root-dir "$d/kubelet" \
		--hostname-override "$CLUSTER_NODE"
	wait_for kubelet 60 "$kubectl" --kubeconfig "$d/admin.kubeconfig" get node "$CLUSTER_NODE"
	log "control plane up, node $CLUSTER_NODE registered, in $((SECONDS - t0))s (logs in $d/logs)"
}

# cluster_stop deletes what the tests left on the node through the API (so
# the kubelet stops the pods and removes their cgroups and volumes), then
# stops every process, and unmounts what the kubelet left mounted.
cluster_stop() {
	local kubectl=${E2E_KUBE_BIN:-}/kubectl kc=$CLUSTER_DIR/admin.kubeconfig name
	if [ -n "${E2E_KUBE_BIN:-}" ] && proc_alive kube-apiserver && proc_alive kubelet; then
		# Namespaces of the tests (labelled) and the plugin's.
		timeout 90 "$kubectl" --kubeconfig "$kc" delete namespace --wait=true --ignore-not-found \
			-l nri-cpualign-e2e=true >&2 2>&1 || log "deleting the test namespaces failed"
		timeout 60 "$kubectl" --kubeconfig "$kc" delete namespace nri-cpualign --wait=true --ignore-not-found >&2 2>&1 ||
			log "deleting namespace nri-cpualign failed"
	fi
	for name in "${CLUSTER_PROCS[@]}"; do
		[ -n "${E2E_KUBE_BIN:-}" ] && stop_proc "$name"
	done
	cluster_unmount
	rm -f "$CLUSTER_RUN/dir"
}

# cluster_unmount: the volumes (ConfigMaps are tmpfs mounts) of pods the
# kubelet did not get to tear down, under $CLUSTER_DIR; and the kubelet's
# symlinks to their logs in the fixed /var/log/containers.
cluster_unmount() {
	local m
	[ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR" ] || return 0
	findmnt -rn -o TARGET | grep -F "$CLUSTER_DIR/" | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
	done
	find /var/log/containers -maxdepth 1 -type l -lname "$CLUSTER_DIR/*" -delete 2>/dev/null || true
}

# cluster_kill_leftovers stops the processes an earlier run that was killed
# before its cleanup left behind (its pid files name them).
cluster_kill_leftovers() {
	local name dir
	[ -d "$CLUSTER_RUN" ] || return 0
	for name in "${CLUSTER_PROCS[@]}"; do
		if proc_alive "$name"; then
			log "stopping $name left by an earlier run (pid $(cat "$CLUSTER_RUN/$name.pid"))"
			stop_proc "$name"
		fi
	done
	cluster_hugetlb_umount
	dir=$(cat "$CLUSTER_RUN/dir" 2>/dev/null) || return 0
	if [ -d "$dir" ]; then
		log "unmounting what the earlier run left in $dir (kept for its logs)"
		(CLUSTER_DIR=$dir && cluster_unmount)
	fi
	rm -f "$CLUSTER_RUN/dir"
}
