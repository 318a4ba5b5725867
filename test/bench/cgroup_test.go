package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
)

// BenchmarkCgroupPass is the direct applier's pass alone, on the node's
// real cgroup file system: the cpuset.cpus of 400 cgroups written in turn
// (one op), alternating between two values as the pool shrinks and
// grows. files=by-path opens, writes and closes each file (a pass before
// the files were kept); files=kept writes through cgroups.CPUsFile held
// open (one system call each). The round trip's fake cgroup tree is plain
// files, where a kept file needs a truncate and a link check as well, so
// only a real hierarchy shows the difference. It needs root and a
// cpuset hierarchy it can make cgroups in (cgroup v1's cpuset, or v2 with
// the cpuset controller), and skips otherwise.
func BenchmarkCgroupPass(b *testing.B) {
	const n = 400
	for _, kept := range []bool{false, true} {
		name := "files=by-path"
		if kept {
			name = "files=kept"
		}
		b.Run(fmt.Sprintf("cgroups=%d/%s", n, name), func(b *testing.B) {
			root, base, values := cpusetTree(b, n)
			files := make([]*cgroups.CPUsFile, n)
			for i := range files {
				f, err := root.CPUsFile(fmt.Sprintf("%s/c%d", base, i))
				if err != nil {
					b.Fatal(err)
				}
				files[i] = f
			}
			defer func() {
				for _, f := range files {
					f.Close()
				}
			}()
			samples := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v := values[i%2]
				start := time.Now()
				for _, f := range files {
					if err := f.Write(v, kept); err != nil {
						b.Fatal(err)
					}
				}
				samples[i] = time.Since(start)
			}
			b.StopTimer()
			reportPercentiles(b, samples)
		})
	}
}

// cpusetTree makes n cgroups under a new cgroup of the node's cpuset
// hierarchy, removed when b ends, and returns the root, their parent's
// cgroups path and two cpusets they can take (all the parent's CPUs, and
// its first).
func cpusetTree(b *testing.B, n int) (cgroups.Root, string, [2]string) {
	b.Helper()
	const sys = "/sys/fs/cgroup"
	root := cgroups.New(sys)
	top := root.CpusetRoot()
	read := func(name string) string {
		v, err := os.ReadFile(filepath.Join(top, name))
		if err != nil {
			b.Skipf("no cpuset hierarchy at %s: %v", top, err)
		}
		return strings.TrimSpace(string(v))
	}
	var cpus, mems string
	if root.Unified() {
		if !strings.Contains(read("cgroup.subtree_control"), "cpuset") {
			b.Skip("the cgroup v2 root does not delegate cpuset")
		}
		cpus, mems = read("cpuset.cpus.effective"), ""
	} else {
		cpus, mems = read("cpuset.cpus"), read("cpuset.mems")
	}
	all, err := cpuset.Parse(cpus)
	if err != nil || all.Size() < 2 {
		b.Skipf("the cpuset root has CPUs %q: two or more needed", cpus)
	}
	base := fmt.Sprintf("/nri-bench-pass-%d", os.Getpid())
	dir := filepath.Join(top, base)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Skipf("cannot make a cgroup: %v", err)
	}
	children := make([]string, 0, n)
	b.Cleanup(func() {
		for _, c := range children {
			os.Remove(c)
		}
		os.Remove(dir)
	})
	write := func(path, v string) {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if root.Unified() {
		write(filepath.Join(dir, "cgroup.subtree_control"), "+cpuset")
	} else {
		write(filepath.Join(dir, "cpuset.cpus"), cpus)
		write(filepath.Join(dir, "cpuset.mems"), mems)
	}
	for i := 0; i < n; i++ {
		c := filepath.Join(dir, fmt.Sprintf("c%d", i))
		if err := os.Mkdir(c, 0o755); err != nil {
			b.Fatal(err)
		}
		children = append(children, c)
		if !root.Unified() {
			write(filepath.Join(c, "cpuset.mems"), mems)
		}
	}
	return root, base, [2]string{all.String(), cpuset.New(all.List()[0]).String()}
}
