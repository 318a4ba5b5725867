package sysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NVIDIA's driver creates no class device for /dev/nvidiaN (char 195:N),
// so sysfs cannot lead from the device node to its PCI function. The
// driver publishes the map in procfs instead, one file per GPU:
// <procfs>/driver/nvidia/gpus/<bus location>/information, tab-separated
// "Key: \t value" lines (Model, IRQ, GPU UUID, Bus Location, Device
// Minor, ...).

// NVIDIAMajor is the fixed major number of NVIDIA's device nodes:
// /dev/nvidiaN is 195:N, nvidia-modeset 195:254, nvidiactl 195:255.
const NVIDIAMajor = 195

// NVIDIAMaxGPUMinor is the largest minor that is a GPU: 254 and 255 are
// the control nodes, which have no locality.
const NVIDIAMaxGPUMinor = 253

// maxInformationSize bounds what is read of one information file (the
// real H200's is 274 bytes).
const maxInformationSize = 16 << 10

// maxNVIDIAGPUs bounds how many GPU directories are read.
const maxNVIDIAGPUs = 256

// NVIDIAGPU is one GPU as its procfs information file describes it.
type NVIDIAGPU struct {
	// UUID is "GPU-" and the GPU's UUID, as NVIDIA_VISIBLE_DEVICES names it.
	UUID string
	// PCI is the Bus Location, in ParsePCIAddress's canonical form.
	PCI string
	// Minor is the Device Minor: the GPU is /dev/nvidia<Minor>, char 195:Minor.
	Minor int
	// File is the information file it was read from.
	File string
}

// ParseNVIDIAInformation reads the fields the device hints need from an
// information file's content: GPU UUID, Bus Location and Device Minor.
// A file without one of them (a truncated read), with a bus location
// that is no PCI address, a minor that is no GPU's (0-253), or a UUID
// without the "GPU-" prefix is an error saying which field is wrong.
func ParseNVIDIAInformation(data []byte) (NVIDIAGPU, error) {
	var g NVIDIAGPU
	var haveUUID, haveBus, haveMinor bool
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue // Model and others may wrap; only the keys below matter
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "GPU UUID":
			if haveUUID {
				return g, errors.New(`"GPU UUID" given twice`)
			}
			if !strings.HasPrefix(value, "GPU-") || len(value) > 64 || strings.ContainsAny(value, " \t,") {
				return g, fmt.Errorf("GPU UUID %q: want GPU-<uuid>", shorten(value))
			}
			g.UUID, haveUUID = value, true
		case "Bus Location":
			if haveBus {
				return g, errors.New(`"Bus Location" given twice`)
			}
			addr, err := ParsePCIAddress(value)
			if err != nil {
				return g, fmt.Errorf(`"Bus Location": %w`, err)
			}
			g.PCI, haveBus = addr, true
		case "Device Minor":
			if haveMinor {
				return g, errors.New(`"Device Minor" given twice`)
			}
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 || n > NVIDIAMaxGPUMinor {
				return g, fmt.Errorf("Device Minor %q: want 0-%d", shorten(value), NVIDIAMaxGPUMinor)
			}
			g.Minor, haveMinor = n, true
		}
	}
	var missing []string
	if !haveUUID {
		missing = append(missing, "GPU UUID")
	}
	if !haveBus {
		missing = append(missing, "Bus Location")
	}
	if !haveMinor {
		missing = append(missing, "Device Minor")
	}
	if len(missing) > 0 {
		return g, fmt.Errorf("no %s line (truncated?)", strings.Join(missing, ", "))
	}
	return g, nil
}

// NVIDIAGPUs is what ReadNVIDIAGPUs found: the GPUs whose information
// file parsed, and an error per file that did not.
type NVIDIAGPUs struct {
	GPUs []NVIDIAGPU
	// Bad names each information file that could not be read or
	// parsed, and why.
	Bad []error
}

// ByMinor is the GPU that is /dev/nvidia<minor>.
func (n NVIDIAGPUs) ByMinor(minor int64) (NVIDIAGPU, bool) {
	for _, g := range n.GPUs {
		if int64(g.Minor) == minor {
			return g, true
		}
	}
	return NVIDIAGPU{}, false
}

// ByUUID is the GPU with the UUID ("GPU-...", compared without regard to
// case).
func (n NVIDIAGPUs) ByUUID(uuid string) (NVIDIAGPU, bool) {
	for _, g := range n.GPUs {
		if strings.EqualFold(g.UUID, uuid) {
			return g, true
		}
	}
	return NVIDIAGPU{}, false
}

// ReadNVIDIAGPUs reads every <procRoot>/driver/nvidia/gpus/*/information,
// in directory order. No such directory (no NVIDIA driver, or a procfs
// root without it) is no GPU and no error. A file that is unreadable,
// larger than 16 KiB or does not parse is listed in Bad with its path;
// two GPUs claiming one minor or one UUID are both bad. err is for the
// directory itself only.
func ReadNVIDIAGPUs(procRoot string) (NVIDIAGPUs, error) {
	var out NVIDIAGPUs
	dir := filepath.Join(procRoot, "driver", "nvidia", "gpus")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("procfs: %w", err)
	}
	if len(entries) > maxNVIDIAGPUs {
		return out, fmt.Errorf("procfs: %s: %d entries, more than the %d read", dir, len(entries), maxNVIDIAGPUs)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(dir, name, "information")
		data, err := readBounded(p, maxInformationSize)
		if err != nil {
			out.Bad = append(out.Bad, fmt.Errorf("procfs: %w", err))
			continue
		}
		g, err := ParseNVIDIAInformation(data)
		if err != nil {
			out.Bad = append(out.Bad, fmt.Errorf("procfs: %s: %w", p, err))
			continue
		}
		g.File = p
		out.GPUs = append(out.GPUs, g)
	}
	out.dropDuplicates()
	return out, nil
}

// dropDuplicates moves GPUs sharing a minor or a UUID to Bad: which one
// a container holds cannot be told.
func (n *NVIDIAGPUs) dropDuplicates() {
	minors, uuids := map[int]int{}, map[string]int{}
	for _, g := range n.GPUs {
		minors[g.Minor]++
		uuids[strings.ToLower(g.UUID)]++
	}
	kept := n.GPUs[:0]
	for _, g := range n.GPUs {
		if minors[g.Minor] > 1 || uuids[strings.ToLower(g.UUID)] > 1 {
			n.Bad = append(n.Bad, fmt.Errorf("procfs: %s: Device Minor %d or GPU UUID %s is another GPU's too", g.File, g.Minor, g.UUID))
			continue
		}
		kept = append(kept, g)
	}
	n.GPUs = kept
}

// readBounded reads the regular file at p, at most limit bytes; a larger
// file is an error naming it.
func readBounded(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, limit)
	}
	return data, nil
}
