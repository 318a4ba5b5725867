package sysfstest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// realH200 is the files of a real host with one NVIDIA H200, copied byte
// for byte (testdata/README.md says from where and what they hold).
//
//go:embed testdata/real-h200.tar.gz
var realH200 []byte

// RealH200PCI is the H200's PCI function on that host.
const RealH200PCI = "0000:00:06.0"

// RealH200UUID is its GPU UUID.
const RealH200UUID = "GPU-f7126b01-e63e-79d5-4f40-f4649151743c"

// WriteRealH200 unpacks the real H200 host's files under dir and returns
// the roots that play /sys and /proc. The host's
// /sys/bus/pci/devices/0000:00:06.0 was copied as a directory; here it is
// the kernel's symlink into /sys/devices/pci0000:00/, the only place the
// device hint provider follows it to. File contents are unchanged.
func WriteRealH200(dir string) (sys, proc string, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(realH200))
	if err != nil {
		return "", "", err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", "", err
		}
		name := filepath.Clean(h.Name)
		if !strings.HasPrefix(name, "real-h200") || strings.Contains(name, "..") {
			return "", "", fmt.Errorf("sysfstest: unexpected entry %q in the H200 archive", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", "", err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", "", err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return "", "", err
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return "", "", err
			}
		default:
			return "", "", fmt.Errorf("sysfstest: entry %q of type %c in the H200 archive", h.Name, h.Typeflag)
		}
	}
	sys, proc = filepath.Join(dir, "real-h200", "sys"), filepath.Join(dir, "real-h200", "proc")
	copied := filepath.Join(sys, "bus", "pci", "devices", RealH200PCI)
	fn := filepath.Join(sys, "devices", "pci0000:00", RealH200PCI)
	if err := os.MkdirAll(filepath.Dir(fn), 0o755); err != nil {
		return "", "", err
	}
	if err := os.Rename(copied, fn); err != nil {
		return "", "", err
	}
	if err := os.Symlink("../../../devices/pci0000:00/"+RealH200PCI, copied); err != nil {
		return "", "", err
	}
	return sys, proc, nil
}

// GPU is an NVIDIA GPU for WriteNVIDIA: its PCI function and what its
// procfs information file says.
type GPU struct {
	PCI   string // 0000:86:00.0
	Minor int    // /dev/nvidia<Minor>
	UUID  string // GPU-...
	// NUMA is numa_node's content ("1", "-1"); LocalCPUs is
	// local_cpulist's ("" leaves it out).
	NUMA, LocalCPUs string
	// Information replaces the generated information file when set.
	Information string
}

// NVIDIAInformation is an information file as the 580 driver writes it
// (the real H200's layout, tabs and all), for g.
func NVIDIAInformation(g GPU) string {
	return "Model: \t\t NVIDIA H200\n" +
		"IRQ:   \t\t 41\n" +
		"GPU UUID: \t " + g.UUID + "\n" +
		"Video BIOS: \t 96.00.a5.00.1a\n" +
		"Bus Type: \t PCIe\n" +
		"DMA Size: \t 52 bits\n" +
		"DMA Mask: \t 0xfffffffffffff\n" +
		"Bus Location: \t " + g.PCI + "\n" +
		fmt.Sprintf("Device Minor: \t %d\n", g.Minor) +
		"GPU Firmware: \t 580.159.04\n" +
		"GPU Excluded:\t No\n"
}

// WriteNVIDIA writes each GPU's PCI function under the /sys root sys
// (devices/pci<domain>:<bus>/<addr>/{numa_node,local_cpulist} and the
// bus/pci/devices/<addr> link, as the kernel lays them out) and its
// information file under the /proc root proc
// (driver/nvidia/gpus/<addr>/information). No /sys/dev/char/195:N entry:
// the driver registers none.
func WriteNVIDIA(sys, proc string, gpus ...GPU) error {
	for _, g := range gpus {
		bridge := "pci" + g.PCI[:7]
		files := map[string]string{
			filepath.Join(sys, "devices", bridge, g.PCI, "numa_node"):             g.NUMA + "\n",
			filepath.Join(sys, "devices", bridge, g.PCI, "vendor"):                "0x10de\n",
			filepath.Join(sys, "devices", bridge, g.PCI, "class"):                 "0x030200\n",
			filepath.Join(proc, "driver", "nvidia", "gpus", g.PCI, "information"): NVIDIAInformation(g),
		}
		if g.LocalCPUs != "" {
			files[filepath.Join(sys, "devices", bridge, g.PCI, "local_cpulist")] = g.LocalCPUs + "\n"
		}
		if g.Information != "" {
			files[filepath.Join(proc, "driver", "nvidia", "gpus", g.PCI, "information")] = g.Information
		}
		for p, content := range files {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				return err
			}
		}
		link := filepath.Join(sys, "bus", "pci", "devices", g.PCI)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("../../../devices/"+bridge+"/"+g.PCI, link); err != nil {
			return err
		}
	}
	return nil
}
