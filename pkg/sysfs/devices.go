package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DeviceNUMANode returns the NUMA node of a character ("char") or block
// ("block") device given by major:minor, as the device hint provider needs
// it. It resolves root/dev/<kind>/<major>:<minor> (a symlink into
// root/devices/...) and walks up from the device towards root/devices to the
// first directory holding a numa_node file, usually the PCI function the
// device hangs off.
//
// ok is false, with a nil error, when the device has no NUMA affinity: no
// sysfs entry (a purely virtual device, or one sysfs does not show), no
// numa_node on the way up, or numa_node < 0 (the kernel writes -1 when the
// firmware gives no locality). Only paths derived from major:minor are read,
// and the walk never leaves root. A numa_node file that does not parse, or
// a link that points outside root, is an error naming the file.
func DeviceNUMANode(root, kind string, major, minor int64) (node int, ok bool, err error) {
	if kind != "char" && kind != "block" {
		return 0, false, fmt.Errorf("sysfs: device kind %q: want char or block", kind)
	}
	if major < 0 || minor < 0 {
		return 0, false, fmt.Errorf("sysfs: device %s %d:%d: negative major or minor", kind, major, minor)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return 0, false, fmt.Errorf("sysfs: root: %w", err)
	}
	link := filepath.Join(realRoot, "dev", kind, strconv.FormatInt(major, 10)+":"+strconv.FormatInt(minor, 10))
	dir, err := filepath.EvalSymlinks(link)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sysfs: %w", err)
	}
	stop := filepath.Join(realRoot, "devices")
	if !within(dir, stop) {
		return 0, false, fmt.Errorf("sysfs: %s: link leads to %s, outside %s", link, dir, stop)
	}
	for d := dir; within(d, stop) && d != stop; d = filepath.Dir(d) {
		p := filepath.Join(d, "numa_node")
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("sysfs: %w", err)
		}
		text := strings.TrimSpace(string(data))
		n, err := strconv.Atoi(text)
		if err != nil || n >= maxDeviceNUMANode {
			return 0, false, fmt.Errorf("sysfs: %s: want a NUMA node id (or -1) below %d, content %q", p, maxDeviceNUMANode, shorten(text))
		}
		if n < 0 {
			return 0, false, nil
		}
		return n, true, nil
	}
	return 0, false, nil
}

// Device is a device node of a container, as the runtime lists it: kind
// "char" or "block" and its major:minor numbers.
type Device struct {
	Kind         string
	Major, Minor int64
}

// DeviceNUMANodes returns the distinct NUMA nodes of a container's devices,
// ascending, for one device hint provider (policy.Engine.DeviceHints):
// the container holds all of them, so its hints must cover every node.
// Devices without NUMA affinity are skipped; an empty result means no
// preference. The first error stops the walk (it names the file).
func DeviceNUMANodes(root string, devs []Device) ([]int, error) {
	seen := map[int]bool{}
	var nodes []int
	for _, d := range devs {
		n, ok, err := DeviceNUMANode(root, d.Kind, d.Major, d.Minor)
		if err != nil {
			return nil, err
		}
		if ok && !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	sort.Ints(nodes)
	return nodes, nil
}

// maxDeviceNUMANode bounds the node ids DeviceNUMANode accepts: hints.Mask
// holds 64 nodes.
const maxDeviceNUMANode = 64

// shorten keeps error texts readable when a file holds garbage.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// within reports whether path is dir or below it (both cleaned, absolute).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
