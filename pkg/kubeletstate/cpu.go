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
	"hash/fnv"
	"maps"
	"slices"
	"strings"
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

// ParseCPU parses a cpu_manager_state file and verifies its checksum as the
// kubelet does. In V4 the "data" string is authoritative and its
// "dataChecksum" is checksum.New of the string: FNV-32a over dump.ForHash's
// "(string)" followed by the string's bytes. In V2 "checksum" is FNV-32a
// over dump.ForHash of the kubelet's struct (see legacyForm); 0 is
// accepted, as by the kubelet. A V3 file with pod-level podEntries is not
// verified: their values are the kubelet's PodEntry structs, which the
// import does not model. Errors name the field at fault; nothing here
// panics.
func ParseCPU(raw []byte) (CPUState, error) {
	var outer cpuFile
	if err := json.Unmarshal(raw, &outer); err != nil {
		return CPUState{}, fmt.Errorf("not a cpu_manager_state file: %w", err)
	}
	if outer.Data == nil && outer.DataChecksum == nil {
		if outer.PodEntries != nil {
			return outer.state(3), nil
		}
		if outer.Checksum != 0 && !outer.legacyChecksumOK() {
			return CPUState{}, fmt.Errorf(`"checksum" %d does not match the state (it hashes to %d): checkpoint is corrupted`,
				outer.Checksum, fnv32a(outer.legacyForm(formV2)))
		}
		return outer.state(2), nil
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
func StringChecksum(s string) uint32 { return fnv32a("(string)" + s) }

// fnv32a is the kubelet checksum's hash (hash/fnv's 32-bit FNV-1a).
func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// The struct layouts a V2 file's checksum may have been computed over.
const (
	formV2 = iota // CPUManagerCheckpointV2, as every 1.36 kubelet writes it
	formV3        // CPUManagerCheckpoint (V3) with no pod entries: omitted in JSON, hashed empty
	formV1        // CPUManagerCheckpointV1: a flat entries map, only when there are none
)

// legacyChecksumOK reports whether the V2 checksum matches one of the
// layouts the kubelet's reader tries.
func (f *cpuFile) legacyChecksumOK() bool {
	forms := []int{formV2, formV3}
	if len(f.Entries) == 0 {
		forms = append(forms, formV1)
	}
	for _, form := range forms {
		if uint64(fnv32a(f.legacyForm(form))) == f.Checksum {
			return true
		}
	}
	return false
}

// legacyForm prints the kubelet's checkpoint struct as its checksum reads
// it: go-spew's "%#v" as k8s.io/utils/dump.ForHash configures it (sorted
// map keys; types on struct fields only; strings unquoted), with Checksum
// 0 and the type named CPUManagerCheckpoint whatever its version (the
// kubelet replaces the versioned name before hashing).
func (f *cpuFile) legacyForm(form int) string {
	var b strings.Builder
	b.WriteString("(*state.CPUManagerCheckpoint){PolicyName:(string)")
	b.WriteString(f.PolicyName)
	b.WriteString(" DefaultCPUSet:(string)")
	b.WriteString(f.DefaultCPUSet)
	if form == formV1 {
		b.WriteString(" Entries:(map[string]string)map[]")
	} else {
		b.WriteString(" Entries:(map[string]map[string]string)map[")
		for i, pod := range slices.Sorted(maps.Keys(f.Entries)) {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(pod)
			b.WriteString(":map[")
			for j, name := range slices.Sorted(maps.Keys(f.Entries[pod])) {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(name)
				b.WriteByte(':')
				b.WriteString(f.Entries[pod][name])
			}
			b.WriteByte(']')
		}
		b.WriteByte(']')
	}
	if form == formV3 {
		b.WriteString(" PodEntries:(state.PodCPUAssignments)map[]")
	}
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return b.String()
}
