package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// statusDaemon starts NRI's runtime side and the daemon in process on the
// fixture machine named, with metrics on a free loopback port, and
// returns the runtime, the sysfs root and the address /state is served on.
func statusDaemon(t *testing.T, fixture, toml string) (*nritest.Runtime, string, string) {
	t.Helper()
	// A short directory: the NRI socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "nri-status-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sys := filepath.Join(dir, "sys")
	if err := sysfstest.WriteNamed(sys, fixture); err != nil {
		t.Fatal(err)
	}
	rt := nritest.New(dir, nritest.WithErrorf(t.Errorf))
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	cfg, err := config.Load([]byte(`state_dir = "` + filepath.Join(dir, "state") + `"
sysfs_root = "` + sys + `"
socket_path = "` + rt.Socket() + `"
metrics_address = "127.0.0.1:0"
reconcile_period = "0s"
shared_pool_updates = "in-answer"
log_format = "json"
` + toml))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	// Every container got its CPUs at this time (the SINCE column).
	at := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	d, err := daemon.New(cfg, daemon.WithLogger(log), daemon.WithNow(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	select {
	case <-d.Synchronized():
	case err := <-done:
		t.Fatalf("daemon stopped before synchronizing: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no Synchronize in 30 s:\n%s", logs.String())
	}
	// The daemon logs the bound address before it connects.
	m := regexp.MustCompile(`"address":"([^"]+)"[^\n]*"msg":"serving /metrics`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	return rt, sys, m[1]
}

// startPod runs a one-container pod of r through the runtime: RunPodSandbox,
// CreateContainer, StartContainer.
func startPod(t *testing.T, rt *nritest.Runtime, uid, ns, name, ctr string, r podres.Resources) {
	t.Helper()
	ctx := context.Background()
	pod := nritest.NewPod(uid, name, ns, podres.PodQOS(r))
	pod.Linux.Resources = nritest.PodResources(r)
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	c := rt.NewContainer(pod, ctr, r)
	if _, err := rt.CreateContainer(ctx, pod, c); err != nil {
		t.Fatalf("%s/%s: %v", ns, name, err)
	}
	if err := rt.StartContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// TestStatusAgainstDaemon asks a running daemon on epyc-7303-2p.
//
// The machine (sysfstest): 64 CPUs, core k = {k, k+32}; NUMA node 0 =
// socket 0 = CPUs 0-15,32-47, node 1 = 16-31,48-63; L3 g = cores
// 4g..4g+3 = CPUs 4g..4g+3,32+4g..32+4g+3, L3 0-3 on node 0, 4-7 on 1.
//
// reserved_system_cpus = 0,32 (core 0). Without topology manager the
// kubelet's packed allocation takes whole cores in id order on the socket
// with the fewest free CPUs (socket 0, 30 free, core 0 reserved):
//   - default/web app, 6 CPUs: cores 1-3 = 1-3,33-35 (L3 0, with core 0)
//   - default/db main, 8 CPUs: cores 4-7 = 4-7,36-39 (exactly L3 1)
//   - batch/worker: Burstable, in the shared pool.
//
// shared = 0-63 minus 1-7,33-39 = 0,8-32,40-63 (50 CPUs, the reserved
// ones included); free = shared minus 0,32 = 8-31,40-63 (48).
// NUMA 0: 32 CPUs, reserved 2, exclusive 14, free 8-15,40-47 (16).
// NUMA 1: 32 CPUs, all free. L3 0: 2 reserved + 6 exclusive, none free;
// L3 1: 8 exclusive; L3 2 (8-11,40-43) and 3 (12-15,44-47) free, as are
// 4-7 on node 1 (16-19,48-51 ... 28-31,60-63).
func TestStatusAgainstDaemon(t *testing.T) {
	rt, sys, addr := statusDaemon(t, "epyc-7303-2p", `reserved_system_cpus = "0,32"`+"\n")
	startPod(t, rt, "u-web", "default", "web", "app", podres.GuaranteedCPUs(6))
	startPod(t, rt, "u-db", "default", "db", "main", podres.GuaranteedCPUs(8))
	startPod(t, rt, "u-batch", "batch", "worker", "worker", podres.Resources{CPURequestMilli: 500, CPULimitMilli: 2000, MemLimit: 64 << 20})

	var out, errb bytes.Buffer
	if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys}, noEnv, nil, &out, &errb); code != exitOK {
		t.Fatalf("status exit %d:\n%s", code, errb.String())
	}
	want := "plugin at " + addr + `: connected to the runtime, synchronized
cpu_manager_policy static, topology_manager_policy none, scope container

reserved CPUs:  0,32 (2)
shared pool:    0,8-32,40-63 (50), 1 container
exclusive CPUs: 1-7,33-39 (14), 2 containers
free CPUs:      8-31,40-63 (48)

POD          CONTAINER  CPUS       NUMA  L3  SINCE
default/db   main       4-7,36-39  0     1   2026-11-25T10:05:00Z
default/web  app        1-3,33-35  0     0   2026-11-25T10:05:00Z

NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0     32    2         14         16    8-15,40-47
1     32    0         0          32    16-31,48-63

L3  NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0   0     8     2         6          0     -
1   0     8     0         8          0     -
2   0     8     0         0          8     8-11,40-43
3   0     8     0         0          8     12-15,44-47
4   1     8     0         0          8     16-19,48-51
5   1     8     0         0          8     20-23,52-55
6   1     8     0         0          8     24-27,56-59
7   1     8     0         0          8     28-31,60-63
`
	if out.String() != want {
		t.Errorf("status printed\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys, "-o", "json"}, noEnv, nil, &out, &errb); code != exitOK {
		t.Fatalf("status -o json exit %d:\n%s", code, errb.String())
	}
	var doc statusJSON
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	c := func(cpus string, n int) cpuCount { return cpuCount{CPUs: cpus, Count: n} }
	none := c("", 0)
	checks := []struct {
		what      string
		got, want any
	}{
		{"connected", doc.Connected, true},
		{"synchronized", doc.Synchronized, true},
		{"policy", doc.Policy, "static"},
		{"reserved", doc.Reserved, c("0,32", 2)},
		{"shared", doc.Shared, c("0,8-32,40-63", 50)},
		{"exclusive", doc.Exclusive, c("1-7,33-39", 14)},
		{"free", doc.Free, c("8-31,40-63", 48)},
		{"shared containers", doc.SharedContainers, 1},
		{"pinned", len(doc.Pinned), 2},
		{"numa nodes", len(doc.NUMANodes), 2},
		{"l3 groups", len(doc.L3Groups), 8},
		{"note", doc.TopologyNote, ""},
	}
	for _, ck := range checks {
		if !equalJSON(ck.got, ck.want) {
			t.Errorf("%s = %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	if len(doc.Pinned) == 2 {
		db := doc.Pinned[0]
		if db.Pod != "default/db" || db.PodUID != "u-db" || db.Container != "main" || db.CPUs != "4-7,36-39" ||
			!equalJSON(db.NUMA, []int{0}) || !equalJSON(db.L3, []int{1}) || db.Since != "2026-11-25T10:05:00Z" || db.ID == "" {
			t.Errorf("pinned[0] = %+v, want default/db main 4-7,36-39 on NUMA 0, L3 1, since 2026-11-25T10:05:00Z", db)
		}
	}
	if len(doc.NUMANodes) == 2 {
		want := groupJSON{ID: 0, CPUs: c("0-15,32-47", 32), Reserved: c("0,32", 2), Exclusive: c("1-7,33-39", 14), Free: c("8-15,40-47", 16)}
		if !equalJSON(doc.NUMANodes[0], want) {
			t.Errorf("numa_nodes[0] = %+v, want %+v", doc.NUMANodes[0], want)
		}
	}
	if len(doc.L3Groups) == 8 {
		want := groupJSON{ID: 1, NUMA: []int{0}, CPUs: c("4-7,36-39", 8), Reserved: none, Exclusive: c("4-7,36-39", 8), Free: none}
		if !equalJSON(doc.L3Groups[1], want) {
			t.Errorf("l3_groups[1] = %+v, want %+v", doc.L3Groups[1], want)
		}
	}

	// The topology of another machine: the summary is left out, saying why.
	other := t.TempDir()
	if err := sysfstest.WriteNamed(other, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", other}, noEnv, nil, &out, &errb); code != exitOK {
		t.Fatalf("status exit %d:\n%s", code, errb.String())
	}
	tail := "\nno per-NUMA-node and per-L3 summary: the plugin's CPUs (0-63) are not this machine's (0-7): run status on the plugin's node, or with its --sysfs-root\n"
	if !strings.HasSuffix(out.String(), tail) || strings.Contains(out.String(), "NUMA  CPUS") {
		t.Errorf("status with another machine's topology printed\n%s\nwant it to end with%s", out.String(), tail)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestStatusDocuments feeds status hand-written /state documents: the
// shapes a running daemon in the test above does not produce.
func TestStatusDocuments(t *testing.T) {
	sys := t.TempDir()
	if err := sysfstest.WriteNamed(sys, "ht-1s-4c"); err != nil { // 8 CPUs, core k = {k, k+4}
		t.Fatal(err)
	}
	serve := func(t *testing.T, code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/state" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	t.Run("since, strict uncore, every CPU taken", func(t *testing.T) {
		// reserved 0,4; the rest exclusive: the pool is down to the
		// reserved CPUs, nothing is free.
		addr := serve(t, 200, `{"connected": false, "synchronized": true, "cpu_manager_policy": "static",
			"topology_manager_policy": "single-numa-node", "topology_manager_scope": "pod", "reserved": "0,4", "shared": "0,4",
			"strict_align_cpus_by_uncorecache": "true", "future_field": 1,
			"containers": [
			  {"id": "c1", "pod": "ns/a", "pod_uid": "ua", "container": "x", "cpus": "1-3,5-7", "exclusive": true, "numa": [0], "l3": [0], "since": "2026-11-25T10:00:00Z"},
			  {"id": "c2", "pod": "ns/b", "pod_uid": "ub", "container": "y", "cpus": "0,4", "exclusive": false, "numa": [0], "l3": [0]}]}`)
		var out, errb bytes.Buffer
		if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys}, noEnv, nil, &out, &errb); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		want := "plugin at " + addr + `: NOT connected to the runtime, synchronized
cpu_manager_policy static, topology_manager_policy single-numa-node, scope pod, strict-align-cpus-by-uncorecache true

reserved CPUs:  0,4 (2)
shared pool:    0,4 (2), only reserved CPUs left, 1 container
exclusive CPUs: 1-3,5-7 (6), 1 container
free CPUs:      none

POD   CONTAINER  CPUS     NUMA  L3  SINCE
ns/a  x          1-3,5-7  0     0   2026-11-25T10:00:00Z

NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0     8     2         6          0     -

L3  NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0   0     8     2         6          0     -
`
		if out.String() != want {
			t.Errorf("status printed\n%s\nwant\n%s", out.String(), want)
		}
	})
	t.Run("held for stopped containers", func(t *testing.T) {
		// reserved 0,4; pod a's app container x runs on its stopped
		// init container's 1,5; pod ub's stopped y holds 2,6 (no
		// running container of that pod says its name). Exclusive =
		// 1-2,5-6, held by nobody running = 2,6, free = 3,7.
		addr := serve(t, 200, `{"connected": true, "synchronized": true, "cpu_manager_policy": "static",
			"topology_manager_policy": "none", "topology_manager_scope": "container", "reserved": "0,4", "shared": "0,3-4,7",
			"containers": [{"id": "c1", "pod": "ns/a", "pod_uid": "ua", "container": "x", "cpus": "1,5", "exclusive": true, "numa": [0], "l3": [0]}],
			"held": [{"pod": "ns/a", "pod_uid": "ua", "container": "init", "cpus": "1,5", "numa": [0], "l3": [0]},
			  {"pod_uid": "ub", "container": "y", "cpus": "2,6", "numa": [0], "l3": [0]}]}`)
		var out, errb bytes.Buffer
		if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys}, noEnv, nil, &out, &errb); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		want := "plugin at " + addr + `: connected to the runtime, synchronized
cpu_manager_policy static, topology_manager_policy none, scope container

reserved CPUs:  0,4 (2)
shared pool:    0,3-4,7 (4), 0 containers
exclusive CPUs: 1-2,5-6 (4), 1 container
held, stopped:  2,6 (2), 2 containers
free CPUs:      3,7 (2)

POD   CONTAINER  CPUS  NUMA  L3
ns/a  x          1,5   0     0

HELD FOR POD  STOPPED CONTAINER  CPUS  NUMA  L3
ns/a          init               1,5   0     0
uid ub        y                  2,6   0     0

NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0     8     2         4          2     3,7

L3  NUMA  CPUS  RESERVED  EXCLUSIVE  FREE  FREE CPUS
0   0     8     2         4          2     3,7
`
		if out.String() != want {
			t.Errorf("status printed\n%s\nwant\n%s", out.String(), want)
		}
		out.Reset()
		if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys, "-o", "json"}, noEnv, nil, &out, &errb); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var doc statusJSON
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Held) != 2 || doc.Held[1].PodUID != "ub" || doc.Held[1].CPUs != "2,6" || doc.HeldOnly.CPUs != "2,6" {
			t.Errorf("-o json held %+v held_only %+v, want init 1,5 and ub/y 2,6; 2,6", doc.Held, doc.HeldOnly)
		}
	})
	t.Run("no topology", func(t *testing.T) {
		addr := serve(t, 200, `{"connected": true, "synchronized": true, "cpu_manager_policy": "none", "topology_manager_policy": "none",
			"topology_manager_scope": "container", "reserved": "", "shared": "0-7", "containers": []}`)
		var out, errb bytes.Buffer
		missing := filepath.Join(t.TempDir(), "nosys")
		if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", missing}, noEnv, nil, &out, &errb); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		for _, w := range []string{"reserved CPUs:  none\n", "shared pool:    0-7 (8), 0 containers\n", "exclusive CPUs: none, 0 containers\n",
			"free CPUs:      0-7 (8)\n", "\nno per-NUMA-node and per-L3 summary: read the topology under " + missing + ": "} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("status lacks %q:\n%s", w, out.String())
			}
		}
	})
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"not ready", "starting\n", 503, "GET http://ADDR/state: 503 Service Unavailable: starting"},
		{"not JSON", "<html>", 200, "GET http://ADDR/state: not a /state document: "},
		{"bad CPU list", `{"reserved": "0-", "shared": "0-7"}`, 200, `nri-cpualign status: ADDR: /state reserved "0-": not a CPU list`},
		{"bad container CPUs", `{"reserved": "0", "shared": "0-3", "containers": [{"pod": "ns/p", "container": "c", "cpus": "x", "exclusive": true}]}`, 200,
			`/state container ns/p/c cpus "x": not a CPU list`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, tc.code, tc.body)
			var out, errb bytes.Buffer
			if code := dispatchEnv([]string{"status", "--address", addr, "--sysfs-root", sys}, noEnv, nil, &out, &errb); code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if want := strings.ReplaceAll(tc.want, "ADDR", addr); !strings.Contains(errb.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout: %q", out.String())
			}
		})
	}
	t.Run("no plugin", func(t *testing.T) {
		// Something listens there but hangs up at once, as a port that is
		// not the plugin's may.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		addr := l.Addr().String()
		var out, errb bytes.Buffer
		if code := dispatchEnv([]string{"status", "--address", addr}, noEnv, nil, &out, &errb); code != exitFailed {
			t.Errorf("exit %d, want %d", code, exitFailed)
		}
		if want := "nri-cpualign status: no answer from a plugin at " + addr + " (is it running, and is this its metrics_address?)"; !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	})
}
