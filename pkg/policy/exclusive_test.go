package policy

import "testing"

// The CPU manager design's "Example pod specs and interpretation" table.
func TestExclusiveCPUsPodTable(t *testing.T) {
	type ctr struct {
		name  string
		milli int64
		want  int // exclusive CPUs; 0 = shared pool
	}
	tests := []struct {
		name       string
		guaranteed bool
		ctrs       []ctr
	}{
		{"guaranteed 0.5 is shared", true, []ctr{{"A", 500, 0}}},
		{"guaranteed 2.0 is exclusive", true, []ctr{{"A", 2000, 2}}},
		{"guaranteed 1.0 + 0.5: A exclusive, B shared", true, []ctr{{"A", 1000, 1}, {"B", 500, 0}}},
		{"guaranteed 1.5 + 0.5: both shared", true, []ctr{{"A", 1500, 0}, {"B", 500, 0}}},
		{"burstable is shared", false, []ctr{{"A", 2000, 0}}},
		{"besteffort is shared", false, []ctr{{"A", 0, 0}}},
		{"guaranteed without CPU is shared", true, []ctr{{"A", 0, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range tc.ctrs {
				qos := Burstable
				if tc.guaranteed {
					qos = Guaranteed
				}
				if c.milli == 0 && !tc.guaranteed {
					qos = BestEffort
				}
				req := Request{Pod: "p", Container: c.name, QoS: qos, CPURequestMilli: c.milli, CPULimitMilli: c.milli}
				if got := ExclusiveCPUs(true, req); got != c.want {
					t.Errorf("container %s (%dm): got %d exclusive CPUs, want %d", c.name, c.milli, got, c.want)
				}
			}
		})
	}
}

// The rule is the static policy's: the none policy gives no container
// exclusive CPUs, and a request below its limit is not Guaranteed's.
func TestExclusiveCPUsNeedsStaticAndLimit(t *testing.T) {
	req := Request{Pod: "p", Container: "c", QoS: Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000}
	if got := ExclusiveCPUs(false, req); got != 0 {
		t.Errorf("none policy: got %d exclusive CPUs, want 0", got)
	}
	req.CPULimitMilli = 3000
	if got := ExclusiveCPUs(true, req); got != 0 {
		t.Errorf("request below limit: got %d exclusive CPUs, want 0", got)
	}
}
