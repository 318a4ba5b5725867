// Command benchtable turns the output of the test/bench benchmarks
// (`go test -bench . ./test/bench`) into the Markdown tables of the README's
// Performance section: one row per decision benchmark (machine, CPUs, NUMA
// nodes, L3 groups, occupancy, option set -> ns, p50, p99 and allocations
// per decision), then the CreateContainer round trips, the growth of the
// cost with the machine, and how the figures compare with issue 9's
// targets. It reads the benchmark output on stdin (other lines are
// ignored) and writes the tables on stdout.
//
//	go test -run '^$' -bench . -benchmem ./test/bench | go run ./test/bench/cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() {
	rows, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark result lines on stdin")
		os.Exit(1)
	}
	render(os.Stdout, rows)
}

// row is one benchmark result.
type row struct {
	bench   string            // BenchmarkDecision, BenchmarkScaling, ...
	machine string            // second name element
	params  map[string]string // the key=value name elements
	metrics map[string]float64
}

func (r row) param(k string) string { return r.params[k] }

// paramList is the key=value name elements, sorted.
func (r row) paramList() []string {
	out := make([]string, 0, len(r.params))
	for k, v := range r.params {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (r row) intParam(k string) int {
	n, _ := strconv.Atoi(r.params[k])
	return n
}

// resultLine is "BenchmarkX/a/b-2   <N>   <value unit>...". The name and
// the figures can be split by output the benchmark printed in between.
var resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*\S.*)$`)
var nameOnly = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s`)
var figuresOnly = regexp.MustCompile(`^\s*(\d+)\s+([0-9.]+ [a-zA-Z/%-]+.*)$`)

// parse reads benchmark output and returns the result rows in input order.
func parse(r io.Reader) ([]row, error) {
	var rows []row
	pending := "" // a name whose figures are still to come
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		var name, figures string
		if m := resultLine.FindStringSubmatch(text); m != nil && strings.Contains(m[3], "ns/op") {
			name, figures = m[1], m[3]
		} else if m := nameOnly.FindStringSubmatch(text); m != nil {
			pending = m[1]
			continue
		} else if m := figuresOnly.FindStringSubmatch(text); m != nil && pending != "" && strings.Contains(m[2], "ns/op") {
			name, figures = pending, m[2]
		} else {
			continue
		}
		pending = ""
		rw, err := parseRow(name, figures)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", line, err, text)
		}
		rows = append(rows, rw)
	}
	return rows, sc.Err()
}

func parseRow(name, figures string) (row, error) {
	parts := strings.Split(name, "/")
	rw := row{bench: parts[0], params: map[string]string{}, metrics: map[string]float64{}}
	for i, p := range parts[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			rw.params[k] = v
		} else if i == 0 {
			rw.machine = p
		}
	}
	f := strings.Fields(figures)
	if len(f)%2 != 0 {
		return rw, fmt.Errorf("odd number of value/unit fields")
	}
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return rw, fmt.Errorf("value %q of %s: %v", f[i], f[i+1], err)
		}
		rw.metrics[f[i+1]] = v
	}
	return rw, nil
}

// us formats nanoseconds as microseconds.
func us(ns float64) string {
	switch {
	case ns >= 100000:
		return fmt.Sprintf("%.0f", ns/1000)
	case ns >= 10000:
		return fmt.Sprintf("%.1f", ns/1000)
	}
	return fmt.Sprintf("%.2f", ns/1000)
}

// optUs is us of a metric, "-" when the benchmark did not report it.
func optUs(r row, metric string) string {
	v, ok := r.metrics[metric]
	if !ok {
		return "-"
	}
	return us(v)
}

func render(w io.Writer, rows []row) {
	var decisions, trips, noise []row
	for _, r := range rows {
		switch r.bench {
		case "BenchmarkDecision", "BenchmarkScaling":
			decisions = append(decisions, r)
		case "BenchmarkCreateContainer":
			trips = append(trips, r)
		case "BenchmarkNoiseFloor":
			noise = append(noise, r)
		}
	}
	if len(decisions) > 0 {
		fmt.Fprintln(w, "| machine | CPUs | NUMA nodes | L3 groups | occupancy % | option set | request CPUs | ns/decision | p50 µs | p99 µs | CPU p50 µs | CPU p99 µs | allocs/decision | B/decision |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, r := range decisions {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %.0f | %.0f |\n",
				r.machine, r.param("cpus"), r.param("numa"), r.param("l3"), occupancy(r), r.param("opts"), r.param("req"),
				r.metrics["ns/op"], us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), optUs(r, "cpu-p50-ns"), optUs(r, "cpu-p99-ns"),
				r.metrics["allocs/op"], r.metrics["B/op"])
		}
	}
	if len(trips) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CreateContainer round trip over NRI (in-process runtime side + daemon, checkpoint written and fsynced):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| machine | existing containers | new container | shared_pool_updates | checkpoint on | mean µs | p50 µs | p99 µs | allocs/op | B/op |")
		fmt.Fprintln(w, "|---|--:|---|---|---|--:|--:|--:|--:|--:|")
		for _, r := range trips {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", r.machine, r.param("existing"), r.param("kind"), updatesMode(r), r.param("state"),
				us(r.metrics["ns/op"]), us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), r.metrics["allocs/op"], r.metrics["B/op"])
		}
	}
	maxK, kWhere, steepest := scaling(w, decisions)
	targets(w, decisions, trips, noise)
	if kWhere != "" {
		fmt.Fprintf(w, "- cost no worse than linear in CPUs: largest growth exponent k = %.2f from the smallest to the largest machine (%s): %s; steepest step between neighbouring sizes k = %s\n",
			maxK, kWhere, verdict(maxK <= 1), steepest)
	}
}

// occupancy is the nominal occupancy, with the reached one when Fill
// stopped short of it (small machines keep room for the request).
func occupancy(r row) string {
	nominal := r.param("occ")
	got, ok := r.metrics["occ-pct"]
	if !ok {
		return nominal
	}
	n, _ := strconv.ParseFloat(nominal, 64)
	if math.Abs(got-n) > 2 {
		return fmt.Sprintf("%s (%.0f)", nominal, got)
	}
	return nominal
}

// typical is a decision's typical cost: the median thread CPU time, else
// the median wall-clock time, else the mean. Medians keep a shared
// machine's bursts of load out of the growth exponent.
func typical(r row) float64 {
	for _, m := range []string{"cpu-p50-ns", "p50-ns", "ns/op"} {
		if v, ok := r.metrics[m]; ok {
			return v
		}
	}
	return 0
}

// scaling prints, per option set and occupancy, the typical decision time on
// each generated machine and the growth exponent between the smallest and
// the largest (time ∝ CPUs^k; k <= 1 is at most linear).
func scaling(w io.Writer, decisions []row) (maxK float64, where, steepest string) {
	type key struct{ opts, occ string }
	byKey := map[key][]row{}
	var keys []key
	sizes := map[int]bool{}
	for _, r := range decisions {
		if r.bench != "BenchmarkScaling" {
			continue
		}
		k := key{r.param("opts"), r.param("occ")}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
		sizes[r.intParam("cpus")] = true
	}
	if len(keys) == 0 {
		return 0, "", ""
	}
	maxSteep := 0.0
	cpus := slices.Sorted(maps.Keys(sizes))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Growth with the machine (generated machines, median µs of thread CPU time per decision; k: time ∝ CPUs^k from the smallest to the largest):")
	fmt.Fprintln(w)
	head := "| option set | occupancy % |"
	sep := "|---|--:|"
	for _, c := range cpus {
		head += fmt.Sprintf(" %d CPUs |", c)
		sep += "--:|"
	}
	fmt.Fprintln(w, head+" k | steepest step |")
	fmt.Fprintln(w, sep+"--:|---|")
	for _, k := range keys {
		at := map[int]float64{}
		for _, r := range byKey[k] {
			at[r.intParam("cpus")] = typical(r)
		}
		line := fmt.Sprintf("| %s | %s |", k.opts, k.occ)
		for _, c := range cpus {
			if v, ok := at[c]; ok {
				line += " " + us(v) + " |"
			} else {
				line += " - |"
			}
		}
		lo, hi := cpus[0], cpus[len(cpus)-1]
		if at[lo] > 0 && at[hi] > 0 && hi > lo {
			k8 := math.Log(at[hi]/at[lo]) / math.Log(float64(hi)/float64(lo))
			line += fmt.Sprintf(" %.2f |", k8)
			if where == "" || k8 > maxK {
				maxK, where = k8, fmt.Sprintf("%s, occupancy %s%%", k.opts, k.occ)
			}
		} else {
			line += " - |"
		}
		// The steepest step between neighbouring sizes: where the growth
		// is locally faster than the endpoints show (e.g. more NUMA nodes).
		steep, steepAt := 0.0, "-"
		for i := 1; i < len(cpus); i++ {
			a, b := at[cpus[i-1]], at[cpus[i]]
			if a > 0 && b > 0 {
				if ks := math.Log(b/a) / math.Log(float64(cpus[i])/float64(cpus[i-1])); steepAt == "-" || ks > steep {
					steep, steepAt = ks, fmt.Sprintf("%.2f (%d→%d)", ks, cpus[i-1], cpus[i])
				}
			}
		}
		line += " " + steepAt + " |"
		if steepAt != "-" && (steepest == "" || steep > maxSteep) {
			maxSteep, steepest = steep, fmt.Sprintf("%s, %s, occupancy %s%%", steepAt, k.opts, k.occ)
		}
		fmt.Fprintln(w, line)
	}
	return maxK, where, steepest
}

// targets compares the figures with issue 9's targets (a report, not a
// verdict on the code: the machine may be loaded).
func targets(w io.Writer, decisions, trips, noise []row) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets:")
	for _, m := range []struct{ metric, what string }{{"p99-ns", "wall-clock"}, {"cpu-p99-ns", "thread CPU time"}} {
		worst, where := 0.0, ""
		var all []float64
		for _, r := range decisions {
			v, ok := r.metrics[m.metric]
			if !ok || r.intParam("cpus") != 256 {
				continue
			}
			all = append(all, v)
			if where == "" || v > worst {
				worst = v
				where = fmt.Sprintf("%s, %s, occupancy %s%%", r.machine, r.param("opts"), r.param("occ"))
			}
		}
		if where != "" {
			sort.Float64s(all)
			within := sort.SearchFloat64s(all, 20000.5)
			fmt.Fprintf(w, "- one decision <= 20 µs p99 on the 256-CPU machines (%s): %d of %d rows within, median p99 %s µs, worst %s µs (%s): %s\n",
				m.what, within, len(all), us(all[len(all)/2]), us(worst), where, verdict(worst <= 20000))
		}
	}
	for _, r := range noise {
		fmt.Fprintf(w, "- noise floor of this machine: a fixed arithmetic loop that allocates nothing (%s, %s) takes thread CPU time p50 %s µs, p99 %s µs (wall-clock p50 %s µs, p99 %s µs); the decision p99s include this spread\n",
			r.bench, strings.Join(r.paramList(), ", "), optUs(r, "cpu-p50-ns"), optUs(r, "cpu-p99-ns"), optUs(r, "p50-ns"), optUs(r, "p99-ns"))
	}
	first := true
	for _, r := range trips {
		if r.param("state") != "disk" {
			continue
		}
		if first {
			fmt.Fprintln(w, "- CreateContainer round trip with checkpoint <= 1 ms (p50, checkpoint on disk):")
			first = false
		}
		fmt.Fprintf(w, "  - %s existing, %s, %s: p50 %s µs, p99 %s µs: %s\n", r.param("existing"), r.param("kind"), updatesMode(r),
			us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), verdict(r.metrics["p50-ns"] <= 1e6))
	}
}

// updatesMode is the round trip's shared_pool_updates (output from before
// the dimension existed was all in-answer).
func updatesMode(r row) string {
	if m := r.param("updates"); m != "" {
		return m
	}
	return "in-answer"
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
