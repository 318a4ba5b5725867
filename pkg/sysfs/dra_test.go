package sysfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// kepExample is KEP-5304's example metadata file (a GPU request), with
// the standard numaNode attribute added to a second device.
const kepExample = `{
  "apiVersion": "metadata.resource.k8s.io/v1alpha1",
  "kind": "DeviceMetadata",
  "metadata": {"name": "my-claim", "namespace": "default", "uid": "abc-123-def-456", "generation": 1},
  "requests": [
    {"name": "gpu-request", "devices": [
      {"name": "gpu-0", "driver": "example.com", "pool": "node-1-gpus",
       "attributes": {
         "driverVersion": {"version": "1.0.0"},
         "index": {"int": 1},
         "model": {"string": "LATEST-GPU-MODEL"},
         "uuid": {"string": "gpu-93d37703-997c-c46f-a531-755e3e0dc2ac"},
         "resource.k8s.io/pciBusID": {"string": "0000:00:01.0"}}},
      {"name": "gpu-1", "driver": "example.com", "pool": "node-1-gpus",
       "attributes": {
         "resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"},
         "resource.kubernetes.io/numaNode": {"int": 1}}},
      {"name": "nic-0", "driver": "example.com", "pool": "node-1-gpus"}
    ]}
  ]
}`

func TestParseDRAMetadata(t *testing.T) {
	devs, err := sysfs.ParseDRAMetadata([]byte(kepExample))
	if err != nil {
		t.Fatal(err)
	}
	want := []sysfs.DRADevice{
		{Claim: "my-claim", Request: "gpu-request", Driver: "example.com", Name: "gpu-0", PCI: "0000:00:01.0"},
		{Claim: "my-claim", Request: "gpu-request", Driver: "example.com", Name: "gpu-1", PCI: "0000:86:00.0", Node: 1, HasNode: true},
		{Claim: "my-claim", Request: "gpu-request", Driver: "example.com", Name: "nic-0"},
	}
	if len(devs) != len(want) {
		t.Fatalf("devices = %+v, want %+v", devs, want)
	}
	for i := range want {
		if devs[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, devs[i], want[i])
		}
	}
	if s := devs[1].String(); s != "DRA claim my-claim request gpu-request example.com/gpu-1 0000:86:00.0" {
		t.Errorf("String = %q", s)
	}
	// A file the framework mounted before a late driver wrote it.
	if devs, err := sysfs.ParseDRAMetadata([]byte("\n")); err != nil || devs != nil {
		t.Fatalf("empty file: %v, %v; want nothing", devs, err)
	}
	for _, tc := range []struct{ name, content, errHas string }{
		{"truncated", kepExample[:len(kepExample)/2], "not DeviceMetadata JSON"},
		{"other kind", `{"apiVersion": "v1", "kind": "ConfigMap"}`, `want metadata.resource.k8s.io/* DeviceMetadata`},
		{"bad pciBusID", strings.Replace(kepExample, "0000:86:00.0", "86:00.0", 1), `device "gpu-1": pciBusID`},
		{"numaNode a string", strings.Replace(kepExample, `numaNode": {"int": 1}`, `numaNode": {"string": "1"}`, 1), "numaNode: not an int attribute"},
		{"numaNode out of range", strings.Replace(kepExample, `numaNode": {"int": 1}`, `numaNode": {"int": 64}`, 1), "numaNode 64: want 0-63"},
		{"not JSON", "\x00\x01", "not DeviceMetadata JSON"},
	} {
		if _, err := sysfs.ParseDRAMetadata([]byte(tc.content)); err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.errHas)
		}
	}
}

func TestReadDRAMetadata(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "metadata.json")
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(good, []byte(kepExample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, []byte(strings.Repeat(" ", sysfs.MaxDRAMetadataSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if devs, err := sysfs.ReadDRAMetadata(good); err != nil || len(devs) != 3 {
		t.Fatalf("good file: %v, %v", devs, err)
	}
	if _, err := sysfs.ReadDRAMetadata(big); err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: err = %v, want one naming it", err)
	}
	if _, err := sysfs.ReadDRAMetadata(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: err = %v", err)
	}
}
