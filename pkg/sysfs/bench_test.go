package sysfs_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// BenchmarkReadDisk reads the biggest fixtures from a real directory, as
// the daemon reads /sys once at start.
func BenchmarkReadDisk(b *testing.B) {
	for _, name := range []string{"ht-2s-6c", "epyc-9754", "xeon-8490h-2p-snc"} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			if err := sysfstest.WriteNamed(dir, name); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				if _, err := sysfs.Read(dir); err != nil {
					b.Fatal(err)
				}
			}
			// The process's CPU time (user + system), which the other
			// jobs of a shared machine inflate less than the wall clock.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkReadHost reads this machine's /sys.
func BenchmarkReadHost(b *testing.B) {
	if _, err := os.Stat("/sys/devices/system/cpu"); err != nil {
		b.Skip("no /sys/devices/system/cpu")
	}
	for i := 0; i < b.N; i++ {
		if _, err := sysfs.Read("/sys"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad is what a test pays per sysfstest.Load.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"ht-2s-6c", "epyc-9754"} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sysfstest.Load(b, name)
			}
		})
	}
}

// processCPU is the process's user + system CPU time in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkGPULookup is what a container with one GPU adds to its
// CreateContainer on an 8-GPU machine: the driver's information files
// read, and the GPU's function located (numa_node -1 and its
// local_cpulist, the longer path).
func BenchmarkGPULookup(b *testing.B) {
	sys, proc := b.TempDir(), b.TempDir()
	if err := sysfstest.WriteNamed(sys, "ht-2s-6c"); err != nil {
		b.Fatal(err)
	}
	var gpus []sysfstest.GPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, sysfstest.GPU{PCI: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Minor: 7 - i,
			UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-000000000000", i), NUMA: "-1", LocalCPUs: "6-11,18-23"})
	}
	if err := sysfstest.WriteNVIDIA(sys, proc, gpus...); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := 0; i < b.N; i++ {
		all, err := sysfs.ReadNVIDIAGPUs(proc)
		if err != nil {
			b.Fatal(err)
		}
		g, ok := all.ByMinor(3)
		if !ok {
			b.Fatal("no minor 3")
		}
		nodes, err := sysfs.DeviceNodes(sys, sysfs.Device{Kind: "pci", PCI: g.PCI})
		if err != nil || len(nodes) != 1 || nodes[0] != 1 {
			b.Fatalf("nodes %v, %v", nodes, err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
