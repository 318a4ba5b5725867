// Package kubeletstate reads the kubelet's cpu_manager_state file for the
// migration import. It knows the layouts the kubelet writes: V2
// ({policyName, defaultCpuSet, entries, checksum}, kubelet ≤ 1.36), V3 (the
// same with podEntries) and V4 (kubelet 1.37: the V3 fields kept for older
// kubelets, with checksum 0, beside "data", the state as a JSON string, and
// "dataChecksum").
package kubeletstate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// CPUState is what the import needs of a cpu_manager_state file.
type CPUState struct {
	// Version is the layout read: 2 (no podEntries), 3 or 4.
	Version       int
	PolicyName    string
	DefaultCPUSet string
	// Entries maps pod UID -> container name -> CPU list.
	Entries map[string]map[string]string
	// PodLevelPods are the pod UIDs of podEntries (pod-level resource
	// managers, KEP-5526), sorted; the plugin does not adopt them.
	PodLevelPods []string
}

// cpuFile is the union of the layouts: the V4 outer object embeds the V3
// fields; its "data" string holds the same fields (and, from 1.37, the
// resize baselines, which the import does not need).
type cpuFile struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	// Only the keys are used; the value's layout is the kubelet's.
	PodEntries   map[string]json.RawMessage `json:"podEntries"`
	Checksum     uint64                     `json:"checksum"`
	Data         *string                    `json:"data"`
	DataChecksum *uint64                    `json:"dataChecksum"`
}

// ParseCPU parses a cpu_manager_state file. In V4 the "data" string is
// authoritative, as for the kubelet, and its "dataChecksum" is verified the
// way the kubelet verifies it (checksum.New of the string: FNV-32a over
// dump.ForHash's "(string)" followed by the string's bytes). The legacy
// "checksum" of V2/V3 (FNV over go-spew's dump of the kubelet's Go struct)
// is not verified: the import checks every entry against the machine
// instead. Errors name the field at fault; nothing here panics.
func ParseCPU(raw []byte) (CPUState, error) {
	var outer cpuFile
	if err := json.Unmarshal(raw, &outer); err != nil {
		return CPUState{}, fmt.Errorf("not a cpu_manager_state file: %w", err)
	}
	if outer.Data == nil && outer.DataChecksum == nil {
		v := 2
		if outer.PodEntries != nil {
			v = 3
		}
		return outer.state(v), nil
	}
	if outer.Data == nil {
		return CPUState{}, fmt.Errorf(`"dataChecksum" without "data"`)
	}
	if outer.DataChecksum == nil {
		return CPUState{}, fmt.Errorf(`"data" without "dataChecksum"`)
	}
	if got := StringChecksum(*outer.Data); uint64(got) != *outer.DataChecksum {
		return CPUState{}, fmt.Errorf(`"dataChecksum" %d does not match "data" (it hashes to %d): checkpoint is corrupted`, *outer.DataChecksum, got)
	}
	var inner cpuFile
	if err := json.Unmarshal([]byte(*outer.Data), &inner); err != nil {
		return CPUState{}, fmt.Errorf(`"data": %w`, err)
	}
	if inner.Data != nil || inner.DataChecksum != nil {
		return CPUState{}, fmt.Errorf(`"data" holds a nested "data" or "dataChecksum"`)
	}
	return inner.state(4), nil
}

func (f *cpuFile) state(v int) CPUState {
	return CPUState{Version: v, PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, Entries: f.Entries,
		PodLevelPods: slices.Sorted(maps.Keys(f.PodEntries))}
}

// StringChecksum is the kubelet's checksum.New of a string value: FNV-32a
// over "(string)" and the string, which is how k8s.io/utils/dump.ForHash
// prints a string.
func StringChecksum(s string) uint32 {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for _, c := range []byte("(string)" + s) {
		h ^= uint32(c)
		h *= prime
	}
	return h
}
