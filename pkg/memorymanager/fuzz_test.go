package memorymanager

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// exercise runs the policy on a state that passed Check: removing each
// container and allocating a small request must keep it consistent. Hint
// generation enumerates every mask, so big machines are left out.
func exercise(t *testing.T, st State) {
	if len(st.Nodes) > 6 {
		return
	}
	pods := slices.Sorted(maps.Keys(st.Assignments))
	for _, pod := range pods {
		for name := range st.Assignments[pod] {
			if err := Check(Remove(st, pod, name)); err != nil {
				t.Fatalf("Remove %s/%s made the state inconsistent: %v", pod, name, err)
			}
		}
		if err := Check(RemovePod(st, pod)); err != nil {
			t.Fatalf("RemovePod %s made the state inconsistent: %v", pod, err)
		}
	}
	pod := guaranteed("fuzz", ctr("c", Request{Memory: Mi, hp2M: 2 * Mi}))
	if _, err := Hints(st, pod, "c", kubever.V137); err != nil {
		t.Fatal(err)
	}
	for _, h := range []hints.Hint{{}, {Affinity: 1, Preferred: true}} {
		next, _, err := Allocate(st, pod, "c", h)
		if err != nil {
			continue
		}
		if err := Check(next); err != nil {
			t.Fatalf("Allocate on %v made the state inconsistent: %v", h, err)
		}
	}
}

func FuzzImport(f *testing.F) {
	f.Add(kubeletFileBytes())
	f.Add([]byte(kubeletV1))
	f.Add([]byte(kubeletV3))
	f.Add([]byte(`{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"checksum":0}`))
	f.Add([]byte(`{"policyName":"Static","machineState":{"0":null},"entries":null,"podEntries":{},"checksum":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ImportKubelet(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := Check(st); err != nil {
			t.Fatalf("imported an inconsistent state: %v", err)
		}
		enc, err := Encode(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(imported)): %v", err)
		}
		if !reflect.DeepEqual(back, st) {
			t.Fatalf("Decode(Encode(x)) = %+v, want %+v", back, st)
		}
		exercise(t, st)
	})
}

func FuzzDecode(f *testing.F) {
	st, err := ImportKubelet(kubeletFileBytes())
	if err != nil {
		f.Fatal(err)
	}
	enc, err := Encode(st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(`{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"reusable":{"p":{"0":{"memory":1}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(data)
		if err != nil {
			return
		}
		enc, err := Encode(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(decoded)): %v", err)
		}
		if !reflect.DeepEqual(back, st) {
			t.Fatalf("Decode(Encode(x)) = %+v, want %+v", back, st)
		}
		exercise(t, st)
	})
}
