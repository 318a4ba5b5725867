package main

import (
	"bytes"
	"strings"
	"testing"
)

// sample is benchmark output as go test prints it, with a log line
// splitting one result (the name first, the figures on a later line) and
// unrelated lines around.
const sample = `goos: linux
pkg: github.com/nri-cpualign/nri-cpualign/test/bench
BenchmarkDecision/ht-1s-4c/cpus=8/numa=1/l3=1/occ=90/opts=packed/req=2-2         	    2000	      3000 ns/op	        66.67 occ-pct	      2500 p50-ns	      9000 p99-ns	    1200 B/op	      20 allocs/op
BenchmarkDecision/epyc-9754/cpus=256/numa=1/l3=16/occ=0/opts=full-pcpus-only/req=8-2 	    2000	     12000 ns/op	     10500 cpu-p50-ns	     19000 cpu-p99-ns	         0 occ-pct	     11000 p50-ns	     25000 p99-ns	   30000 B/op	      60 allocs/op
BenchmarkScaling/gen-16/cpus=16/numa=2/l3=1/occ=50/opts=packed/req=4-2           	    2000	      2000 ns/op	        50 occ-pct	      1900 p50-ns	      4000 p99-ns	     900 B/op	      10 allocs/op
BenchmarkScaling/gen-1024/cpus=1024/numa=8/l3=64/occ=50/opts=packed/req=8-2      	    2000	    128000 ns/op	        50 occ-pct	    120000 p50-ns	    200000 p99-ns	   80000 B/op	     100 allocs/op
BenchmarkCreateContainer/epyc-9754/cpus=256/existing=500/kind=exclusive/state=disk-2 	time="x" level=warning msg="slow"
     100	   2500000 ns/op	   2000000 p50-ns	   9000000 p99-ns	 2600000 B/op	   14000 allocs/op
BenchmarkCreateContainer/epyc-9754/cpus=256/existing=500/kind=exclusive/updates=after-answer/state=disk-2 	     100	    900000 ns/op	    800000 p50-ns	   3000000 p99-ns	  300000 B/op	     700 allocs/op
BenchmarkCreateContainer/epyc-9754/cpus=256/existing=500/kind=shared/updates=in-answer/state=disk/store=journal-2 	     200	    700000 ns/op	    450000 p50-ns	   2000000 p99-ns	  200000 B/op	     255 allocs/op
BenchmarkCreateContainer/epyc-9754/cpus=256/existing=500/kind=shared/updates=in-answer/state=disk/store=snapshot-2 	     200	   1500000 ns/op	   1200000 p50-ns	   5000000 p99-ns	  160000 B/op	     282 allocs/op
BenchmarkSimulate/epyc-9754/cpus=256/ops=0-2         	      20	  30000000 ns/op	  26000000 cpu-ns/op	 2826970 B/op	   28678 allocs/op
BenchmarkSimulate/epyc-9754/cpus=256/ops=4000-2      	      20	  74000000 ns/op	     16000 cpu-ns/operation	     18500 ns/operation	19685647 B/op	  131455 allocs/op
BenchmarkNoiseFloor/work=3000-2 	    2000	      5000 ns/op	      4100 cpu-p50-ns	      9500 cpu-p99-ns	      4200 p50-ns	     10000 p99-ns	       0 B/op	       0 allocs/op
PASS
`

func TestParse(t *testing.T) {
	rows, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 11 {
		t.Fatalf("%d rows, want 11", len(rows))
	}
	tests := []struct {
		name                string
		i                   int
		bench, machine, key string
		value               string
		metric              string
		want                float64
	}{
		{"first decision", 0, "BenchmarkDecision", "ht-1s-4c", "occ", "90", "ns/op", 3000},
		{"allocs", 1, "BenchmarkDecision", "epyc-9754", "opts", "full-pcpus-only", "allocs/op", 60},
		{"GOMAXPROCS suffix stripped", 3, "BenchmarkScaling", "gen-1024", "req", "8", "p99-ns", 200000},
		{"split line", 4, "BenchmarkCreateContainer", "epyc-9754", "state", "disk", "p50-ns", 2000000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rows[tt.i]
			if r.bench != tt.bench || r.machine != tt.machine || r.param(tt.key) != tt.value || r.metrics[tt.metric] != tt.want {
				t.Errorf("row %d = %+v; want bench %s machine %s %s=%s %s=%v", tt.i, r, tt.bench, tt.machine, tt.key, tt.value, tt.metric, tt.want)
			}
		})
	}
}

func TestParseBadValue(t *testing.T) {
	_, err := parse(strings.NewReader("BenchmarkDecision/x/cpus=8-2   10   12x ns/op\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), `"12x"`) {
		t.Fatalf("err = %v, want one naming line 1 and the value", err)
	}
}

// -details: every decision row, collapsed; the main output has the
// epyc-9754 rows only.
func TestRenderDetails(t *testing.T) {
	rows, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var out, main bytes.Buffer
	renderDetails(&out, rows)
	render(&main, rows)
	// ht-1s-4c: 90% nominal, Fill stopped at 66.67% (keeps room for the request).
	row := "| ht-1s-4c | 8 | 1 | 1 | 90 (67) | packed | 2 | 3000 | 2.50 | 9.00 | - | - | 20 | 1200 |"
	if got := out.String(); !strings.HasPrefix(got, "<details>") || !strings.Contains(got, row) || !strings.HasSuffix(got, "</details>\n") {
		t.Errorf("details:\n%s", got)
	}
	if strings.Contains(main.String(), row) {
		t.Errorf("the main output has the ht-1s-4c row:\n%s", main.String())
	}
}

func TestRender(t *testing.T) {
	rows, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	render(&out, rows)
	got := out.String()
	for _, want := range []string{
		"| epyc-9754 | 256 | 1 | 16 | 0 | full-pcpus-only | 8 | 12000 | 11.0 | 25.0 | 10.5 | 19.0 | 60 | 30000 |",
		"| epyc-9754 | 500 | exclusive | in-answer | disk | snapshot | 2500 | 2000 | 9000 | 14000 | 2600000 |",
		"| epyc-9754 | 500 | exclusive | after-answer | disk | snapshot | 900 | 800 | 3000 | 700 | 300000 |",
		"| epyc-9754 | 500 | shared | in-answer | disk | journal | 700 | 450 | 2000 | 255 | 200000 |",
		// Issue 15: the journal row with the snapshot store's p50 beside it.
		"  - 500 existing, shared, in-answer, journal store: p50 450 µs, p99 2000 µs (snapshot store: p50 1200 µs): met",
		"| epyc-9754 | 4000 | 74000 | 64000 | 18.5 | 16.0 | 131455 |",
		"| epyc-9754 | 0 | 30000 | 26000 | - | - | 28678 |",
		// 26 ms of start-up over 4000 lines: 6.5 µs of the 16.
		"noise floor of this machine: a fixed arithmetic loop that allocates nothing (BenchmarkNoiseFloor, work=3000) takes thread CPU time p50 4.10 µs, p99 9.50 µs (wall-clock p50 4.20 µs, p99 10.0 µs)",
		"  - 500 existing, exclusive, after-answer, snapshot store: p50 800 µs, p99 3000 µs: met",
		"- simulate <= 15 µs per operation (4000-line add/remove trace on epyc-9754, start-up included), issue 15: CPU 16.0 µs per line (start-up 6.50 µs of it), wall-clock 18.5 µs per line: missed",
		// Medians (no CPU time reported here): 1.9 µs at 16 CPUs, 120 µs
		// at 1024; k = ln(120/1.9)/ln(64) = 0.9966.
		"| packed | 50 | 1.90 | 120 | 1.00 | 1.00 (16→1024) |",
		"(wall-clock): 0 of 1 rows within, median p99 25.0 µs, worst 25.0 µs (epyc-9754, full-pcpus-only, occupancy 0%): missed",
		"(thread CPU time): 1 of 1 rows within, median p99 19.0 µs, worst 19.0 µs (epyc-9754, full-pcpus-only, occupancy 0%): met",
		"  - 500 existing, exclusive, in-answer, snapshot store: p50 2000 µs, p99 9000 µs: missed",
		"largest growth exponent k = 1.00 from the smallest to the largest machine (packed, occupancy 50%): met; steepest step between neighbouring sizes k = 1.00 (16→1024), packed, occupancy 50%",
		"median µs of thread CPU time",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; output:\n%s", want, got)
		}
	}
}
