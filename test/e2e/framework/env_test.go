package framework

import (
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// clearEnv unsets every variable LoadEnv reads, for the test's duration.
func clearEnv(t *testing.T) {
	for _, k := range []string{"E2E_RUNTIME", "CONTAINERD_ADDRESS", "CRI_RUNTIME_ENDPOINT", "NRI_SOCKET", "E2E_TEST_IMAGE",
		"E2E_CTR", "E2E_CONTAINERD_LOG", "E2E_SETUP_SCRIPT", "E2E_RUN", "E2E_CONTAINERD_PID", "E2E_CRIO_PID",
		"E2E_CRIO_LOG", "E2E_CRIO_CONFIG", "E2E_CRIO_SETUP_SCRIPT"} {
		t.Setenv(k, "")
	}
}

func TestLoadEnvCRIO(t *testing.T) {
	clearEnv(t)
	// setup-crio.sh's env file, with containerd's setup script still set
	// (scripts/e2e.sh runs both).
	for k, v := range map[string]string{
		"E2E_RUNTIME": "crio", "CRI_RUNTIME_ENDPOINT": "unix:///run/crio-e2e/crio.sock", "NRI_SOCKET": "/run/crio-e2e/nri.sock",
		"E2E_TEST_IMAGE": "localhost/nri-e2e/busybox:latest", "E2E_CRIO_PID": "42", "E2E_CRIO_LOG": "/run/crio-e2e/crio.log",
		"E2E_CRIO_CONFIG": "/run/crio-e2e/crio.conf", "E2E_RUN": "/run/crio-e2e", "E2E_SETUP_SCRIPT": "/x/shared/e2e/setup-containerd.sh",
	} {
		t.Setenv(k, v)
	}
	e, err := LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !e.IsCRIO() || e.CRIAddress != "/run/crio-e2e/crio.sock" || e.RuntimePID != 42 || e.RuntimeLog != "/run/crio-e2e/crio.log" ||
		e.CrioSetupScript != "/x/shared/e2e/setup-crio.sh" || e.ContainerdAddress != "" {
		t.Errorf("LoadEnv = %+v", e)
	}
	t.Setenv("E2E_CRIO_LOG", "")
	if _, err := LoadEnv(); err == nil || !strings.Contains(err.Error(), "E2E_CRIO_LOG") || !strings.Contains(err.Error(), "setup-crio.sh") {
		t.Errorf("missing E2E_CRIO_LOG: err = %v", err)
	}
}

func TestLoadEnvContainerdAndErrors(t *testing.T) {
	clearEnv(t)
	if _, err := LoadEnv(); err == nil || !strings.Contains(err.Error(), "CONTAINERD_ADDRESS") {
		t.Errorf("empty environment: err = %v", err)
	}
	for k, v := range map[string]string{
		"CONTAINERD_ADDRESS": "/run/nri-e2e/containerd.sock", "NRI_SOCKET": "/run/nri-e2e/nri.sock", "E2E_TEST_IMAGE": "img",
		"E2E_CTR": "/bin/ctr", "E2E_CONTAINERD_LOG": "/run/nri-e2e/containerd.log", "E2E_SETUP_SCRIPT": "/s.sh", "E2E_RUN": "/run/nri-e2e",
		"E2E_CONTAINERD_PID": "7",
	} {
		t.Setenv(k, v)
	}
	e, err := LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	if e.Runtime != Containerd || e.CRIAddress != e.ContainerdAddress || e.RuntimePID != 7 || e.ContainerdPID != 7 || e.RuntimeLog != e.ContainerdLog {
		t.Errorf("LoadEnv = %+v", e)
	}
	t.Setenv("E2E_RUNTIME", "docker")
	if _, err := LoadEnv(); err == nil || !strings.Contains(err.Error(), `"docker"`) {
		t.Errorf("E2E_RUNTIME=docker: err = %v", err)
	}
}

func TestCgroupNamesAndOOMClamp(t *testing.T) {
	p := &Pod{Config: &cri.PodSandboxConfig{Linux: &cri.LinuxPodSandboxConfig{CgroupParent: "/kubepods/podu"}}}
	ctrd, crio := &Client{}, &Client{Runtime: CRIO}
	if got := ctrd.NewContainer("abc", "x", p).CgroupsPath(); got != "/kubepods/podu/abc" {
		t.Errorf("containerd cgroup %q", got)
	}
	if got := crio.NewContainer("abc", "x", p).CgroupsPath(); got != "/kubepods/podu/crio-abc" {
		t.Errorf("CRI-O cgroup %q", got)
	}
	r := GuaranteedCPUs(1).CRI(Guaranteed)
	ctrd.ClampOOMScoreAdj(r)
	if r.OomScoreAdj != -997 {
		t.Errorf("containerd: oom_score_adj %d, want the kubelet's -997 (containerd clamps it itself)", r.OomScoreAdj)
	}
	crio.ClampOOMScoreAdj(r)
	if r.OomScoreAdj != 0 {
		t.Errorf("CRI-O: oom_score_adj %d, want 0", r.OomScoreAdj)
	}
}
