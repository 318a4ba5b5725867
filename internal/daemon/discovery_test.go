package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// A machine whose thread_siblings_list disagrees with core_id starts (the
// kubelet runs there), with a warning naming the files.
func TestDiscoveryWarningLogged(t *testing.T) {
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	sib := filepath.Join(root, "devices/system/cpu/cpu0/topology/thread_siblings_list")
	if err := os.WriteFile(sib, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]byte(fmt.Sprintf("sysfs_root = %q\nstate_dir = %q\nmetrics_address = \"\"\n%s%s", root, t.TempDir(), reserveCore0, offHostCgroups(t))))
	if err != nil {
		t.Fatal(err)
	}
	log, hook := hookedLogger(t)
	d, err := New(cfg, WithLogger(log))
	if err != nil {
		t.Fatalf("refused a machine the kubelet runs on: %v", err)
	}
	// cpu 0 stays with cpu 4 (core_id 0): core 0 is 0,4.
	if got := readLedger(d, (*ledger.Tx).Topology).CPUsInCores(0).String(); got != "0,4" {
		t.Errorf("core 0 = %q, want 0,4", got)
	}
	for _, e := range hook.AllEntries() {
		if files, ok := e.Data["files"].([]string); ok && e.Level == logrus.WarnLevel && slices.Contains(files, sib) {
			return
		}
	}
	t.Errorf("no warning naming %s", sib)
}
