package kubeletstate

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The V4 files below follow kubelet v1.37's CPUManagerCheckpoint.
// MarshalCheckpoint: the V3 fields at the top (copied from the data, with
// "checksum" 0 so older kubelets read it as V2/V3), then "data", the JSON
// of CPUManagerCheckpointData (empty maps omitted), and "dataChecksum",
// checksum.New(data).
//
// The dataChecksum vectors were computed once, independently of this
// package, by a throwaway Go program that hashes the data string as the
// kubelet does: fnv.New32a() fed fmt.Fprintf(h, "%v",
// k8s.io/utils/dump.ForHash(data)) with k8s.io/utils
// v0.0.0-20260210185600-b8788abfbbc2 (the kubelet's DeepHashObject).
const (
	v4Data   = `{"policyName":"static","defaultCpuSet":"0-1,5-7,11","entries":{"pod-a":{"app":"2-4,8-10"}}}`
	v4DataCk = 2161500089
	// With pod-level entries and resize baselines; their value layout is
	// assumed here (the import reads only podEntries' keys and ignores
	// baselines), the checksum is over the string whatever it holds.
	v4DataFull   = `{"policyName":"static","defaultCpuSet":"0-1,11","entries":{"pod-a":{"app":"2-4,8-10"},"pod-b":{"side":"5,7"}},"podEntries":{"pod-c":"6"},"baselines":{"pod-a":{"app":"2-4,8-10"}}}`
	v4DataFullCk = 268715082
)

func v4File(data string, ck uint64, legacy string) string {
	return `{` + legacy + `,"checksum":0,"data":` + strconv.Quote(data) + `,"dataChecksum":` + strconv.FormatUint(ck, 10) + `}`
}

func TestParseCPU(t *testing.T) {
	for _, c := range []struct {
		name    string
		file    string
		version int
		def     string
		entries map[string]map[string]string
		podLvl  []string
	}{
		// The kubelet's own vectors (v1.36.3 state_checkpoint_test.go,
		// "Restore valid checkpoint", "Restore default cpu set",
		// "Restore checkpoint from checkpoint with v1 checksum"); its
		// JSON key "defaultCPUSet" matches the field case-insensitively.
		{"kubelet V2", `{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}`,
			2, "1-3", map[string]map[string]string{"pod": {"container1": "4-6", "container2": "1-3"}}, nil},
		{"kubelet V2, no entries", `{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845}`, 2, "4-6", nil, nil},
		{"kubelet V1 checksum, no entries", `{"policyName":"none","defaultCPUSet":"1-3","checksum":1694838852}`, 2, "1-3", nil, nil},
		// Vectors computed as the V4 ones (see above) over the kubelet's
		// struct layouts rebuilt in packages named state and checksum:
		// CPUManagerCheckpoint{PolicyName, DefaultCPUSet, Entries,
		// Checksum} (V2, as 1.36 writes it without PodLevelResourceManagers)
		// and the V3 one with an empty PodEntries (the gate on, no pod-level
		// pods: podEntries omitted from the JSON, hashed as map[]).
		{"1.36 V2", `{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"pod-b":{"c1":"5","c0":"11"},"pod-a":{"app":"2-4,8-10"}},"checksum":4042389419}`,
			2, "0-1,6-7", map[string]map[string]string{"pod-a": {"app": "2-4,8-10"}, "pod-b": {"c0": "11", "c1": "5"}}, nil},
		{"1.36 V3 without pod entries", `{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"pod-b":{"c1":"5","c0":"11"},"pod-a":{"app":"2-4,8-10"}},"checksum":2136144797}`,
			2, "0-1,6-7", map[string]map[string]string{"pod-a": {"app": "2-4,8-10"}, "pod-b": {"c0": "11", "c1": "5"}}, nil},
		{"zero checksum", `{"policyName":"static","defaultCpuSet":"0-3","entries":{"p":{"c":"4"}},"checksum":0}`,
			2, "0-3", map[string]map[string]string{"p": {"c": "4"}}, nil},
		{"V3 with podEntries", `{"policyName":"static","defaultCpuSet":"0-3","podEntries":{"pod-c":"4-5"},"checksum":1}`,
			3, "0-3", nil, []string{"pod-c"}},
		{"1.37 V4", v4File(v4Data, v4DataCk, `"policyName":"static","defaultCpuSet":"0-1,5-7,11","entries":{"pod-a":{"app":"2-4,8-10"}}`),
			4, "0-1,5-7,11", map[string]map[string]string{"pod-a": {"app": "2-4,8-10"}}, nil},
		// The data is authoritative: legacy fields that disagree are not read.
		{"1.37 V4, data wins", v4File(v4DataFull, v4DataFullCk, `"policyName":"static","defaultCpuSet":"0-11"`),
			4, "0-1,11", map[string]map[string]string{"pod-a": {"app": "2-4,8-10"}, "pod-b": {"side": "5,7"}}, []string{"pod-c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCPU([]byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != c.version || got.DefaultCPUSet != c.def {
				t.Errorf("got version %d default %q, want %d %q", got.Version, got.DefaultCPUSet, c.version, c.def)
			}
			if len(got.Entries) != len(c.entries) {
				t.Errorf("entries %v, want %v", got.Entries, c.entries)
			}
			for pod, ctrs := range c.entries {
				for name, cpus := range ctrs {
					if got.Entries[pod][name] != cpus {
						t.Errorf("entry %s/%s = %q, want %q", pod, name, got.Entries[pod][name], cpus)
					}
				}
			}
			if !slices.Equal(got.PodLevelPods, c.podLvl) {
				t.Errorf("pod-level pods %v, want %v", got.PodLevelPods, c.podLvl)
			}
		})
	}
}

func TestParseCPURefuses(t *testing.T) {
	legacy := `"policyName":"static","defaultCpuSet":"0-1,5-7,11"`
	for _, c := range []struct{ name, file, want string }{
		{"not JSON", `{`, "not a cpu_manager_state file"},
		// The kubelet's "Restore checkpoint with invalid checksum".
		{"bad checksum", `{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":1337}`,
			`"checksum" 1337 does not match the state (it hashes to 354655845)`},
		{"V2 entry edited", `{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-7","container2":"1-3"}},"checksum":3610638499}`,
			"checkpoint is corrupted"},
		// The V1 layout only when there are no entries to hash.
		{"V1 checksum with entries", `{"policyName":"none","defaultCPUSet":"1-3","entries":{"p":{"c":"4"}},"checksum":1694838852}`,
			"checkpoint is corrupted"},
		{"bad data checksum", v4File(v4Data, v4DataCk+1, legacy), `"dataChecksum" 2161500090 does not match "data" (it hashes to 2161500089)`},
		{"data edited", v4File(strings.Replace(v4Data, "2-4", "2-5", 1), v4DataCk, legacy), "checkpoint is corrupted"},
		{"checksum without data", `{` + legacy + `,"dataChecksum":5}`, `"dataChecksum" without "data"`},
		{"data without checksum", `{` + legacy + `,"data":"{}"}`, `"data" without "dataChecksum"`},
		{"data not JSON", v4File("{", uint64(StringChecksum("{")), legacy), `"data": unexpected end of JSON input`},
		{"nested data", v4File(`{"data":"x"}`, uint64(StringChecksum(`{"data":"x"}`)), legacy), `nested "data"`},
		{"entry not a string", `{"policyName":"static","entries":{"p":{"c":5}}}`, "not a cpu_manager_state file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCPU([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
