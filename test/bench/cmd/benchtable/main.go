// Command benchtable turns the output of the test/bench benchmarks
// (`go test -bench . ./test/bench`) and of BenchmarkSimulate
// (cmd/nri-cpualign) into the Markdown tables of docs/performance.md: the
// decisions on epyc-9754 (machine, CPUs, NUMA nodes, L3 groups, occupancy,
// option set -> ns, p50, p99 and allocations per decision), the growth of
// the cost with the machine, the CreateContainer round trips, simulate,
// and how the figures compare with the targets of issues 9 and 15 (a
// met/missed verdict per row). It reads the benchmark output on stdin
// (other lines are ignored) and writes the tables on stdout; -details
// writes only the table of every decision benchmark, in a collapsed block.
//
//	go test -run '^$' -bench . -benchmem ./test/bench | go run ./test/bench/cmd/benchtable
package main

import (
	"bufio"
	"flag"
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
	details := flag.Bool("details", false, "write only the table of every decision benchmark")
	flag.Parse()
	rows, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark result lines on stdin")
		os.Exit(1)
	}
	if *details {
		renderDetails(os.Stdout, rows)
		return
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

// split sorts the rows by benchmark.
func split(rows []row) (decisions, trips, noise, sims []row) {
	for _, r := range rows {
		switch r.bench {
		case "BenchmarkDecision", "BenchmarkScaling":
			decisions = append(decisions, r)
		case "BenchmarkCreateContainer":
			trips = append(trips, r)
		case "BenchmarkNoiseFloor":
			noise = append(noise, r)
		case "BenchmarkSimulate":
			sims = append(sims, r)
		}
	}
	return decisions, trips, noise, sims
}

func decisionTable(w io.Writer, decisions []row) {
	fmt.Fprintln(w, "| machine | CPUs | NUMA nodes | L3 groups | occupancy % | option set | request CPUs | ns/decision | p50 µs | p99 µs | CPU p50 µs | CPU p99 µs | allocs/decision | B/decision |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range decisions {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %.0f | %.0f |\n",
			r.machine, r.param("cpus"), r.param("numa"), r.param("l3"), occupancy(r), r.param("opts"), r.param("req"),
			r.metrics["ns/op"], us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), optUs(r, "cpu-p50-ns"), optUs(r, "cpu-p99-ns"),
			r.metrics["allocs/op"], r.metrics["B/op"])
	}
}

// renderDetails is the table of every decision benchmark, collapsed.
func renderDetails(w io.Writer, rows []row) {
	decisions, _, _, _ := split(rows)
	if len(decisions) == 0 {
		return
	}
	fmt.Fprintln(w, "<details><summary>Every fixture and generated machine</summary>")
	fmt.Fprintln(w)
	decisionTable(w, decisions)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "</details>")
}

func render(w io.Writer, rows []row) {
	decisions, trips, noise, sims := split(rows)
	var epyc []row
	for _, r := range decisions {
		if r.bench == "BenchmarkDecision" && r.machine == "epyc-9754" {
			epyc = append(epyc, r)
		}
	}
	if len(epyc) == 0 {
		epyc = decisions
	}
	if len(epyc) > 0 {
		fmt.Fprintln(w, "One decision on the 256-CPU `epyc-9754` (every machine: the collapsed table at the end):")
		fmt.Fprintln(w)
		decisionTable(w, epyc)
	}
	maxK, kWhere, steepest := scaling(w, decisions)
	if len(trips) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CreateContainer round trip over NRI (in-process runtime side + daemon, the decision made durable before the answer; store: journal = one record fdatasynced, snapshot = the whole checkpoint rewritten, fsynced, renamed, directory fsynced):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| machine | existing containers | new container | shared_pool_updates | state on | store | mean µs | p50 µs | p99 µs | allocs/op | B/op |")
		fmt.Fprintln(w, "|---|--:|---|---|---|---|--:|--:|--:|--:|--:|")
		for _, r := range trips {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", r.machine, r.param("existing"), r.param("kind"), updatesMode(r), r.param("state"), storeOf(r),
				us(r.metrics["ns/op"]), us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), r.metrics["allocs/op"], r.metrics["B/op"])
		}
	}
	if len(sims) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "`nri-cpualign simulate` on an add/remove trace (BenchmarkSimulate in cmd/nri-cpualign; ops=0 is the start-up alone: reading the machine, building the engine; CPU time is the process's, user + system):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| machine | lines | wall µs per run | CPU µs per run | wall µs per line | CPU µs per line | allocs per run |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|")
		for _, r := range sims {
			perRun := r.metrics["cpu-ns/op"]
			if n := r.intParam("ops"); n > 0 {
				perRun = r.metrics["cpu-ns/operation"] * float64(n)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.0f |\n", r.machine, r.param("ops"), us(r.metrics["ns/op"]), us(perRun),
				optUs(r, "ns/operation"), optUs(r, "cpu-ns/operation"), r.metrics["allocs/op"])
		}
	}
	targets(w, decisions, trips, noise, sims)
	if kWhere != "" {
		fmt.Fprintf(w, "- cost no worse than linear in CPUs: largest growth exponent k = %.2f from the smallest to the largest machine (%s): %s; steepest step between neighbouring sizes k = %s\n",
			maxK, kWhere, verdict(maxK <= 1), steepest)
	}
}

// storeOf is the round trip's store (output from before the dimension
// existed was all snapshot).
func storeOf(r row) string {
	if s := r.param("store"); s != "" {
		return s
	}
	return "snapshot"
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

// targets compares the figures with the targets of issues 9 and 15 (a
// report, not a verdict on the code: the machine may be loaded).
func targets(w io.Writer, decisions, trips, noise, sims []row) {
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
	// The round trips on disk, the default store's row with the other
	// store's p50 beside it.
	type tripKey struct{ existing, kind, updates string }
	snapshotP50 := map[tripKey]float64{}
	var disk []row
	for _, r := range trips {
		if r.param("state") != "disk" {
			continue
		}
		k := tripKey{r.param("existing"), r.param("kind"), updatesMode(r)}
		if storeOf(r) == "snapshot" {
			snapshotP50[k] = r.metrics["p50-ns"]
		}
		if r.param("store") == "" || storeOf(r) == "journal" {
			disk = append(disk, r)
		}
	}
	for _, t := range []struct {
		title    string
		only500  bool
		limitNs  float64
		issueRef string
	}{
		{"CreateContainer round trip <= 1 ms (p50, state on disk)", false, 1e6, "issue 9"},
		{"CreateContainer round trip <= 0.5 ms (p50, state on disk, 500 containers)", true, 5e5, "issue 15"},
	} {
		first := true
		for _, r := range disk {
			if t.only500 && r.param("existing") != "500" {
				continue
			}
			if first {
				fmt.Fprintf(w, "- %s, %s:\n", t.title, t.issueRef)
				first = false
			}
			side := ""
			if v, ok := snapshotP50[tripKey{r.param("existing"), r.param("kind"), updatesMode(r)}]; ok && r.param("store") != "" {
				side = fmt.Sprintf(" (snapshot store: p50 %s µs)", us(v))
			}
			fmt.Fprintf(w, "  - %s existing, %s, %s, %s store: p50 %s µs, p99 %s µs%s: %s\n", r.param("existing"), r.param("kind"), updatesMode(r), storeOf(r),
				us(r.metrics["p50-ns"]), us(r.metrics["p99-ns"]), side, verdict(r.metrics["p50-ns"] <= t.limitNs))
		}
	}
	startup := map[string]float64{}
	for _, r := range sims {
		if r.intParam("ops") == 0 {
			startup[r.machine] = r.metrics["cpu-ns/op"]
		}
	}
	for _, r := range sims {
		n := r.intParam("ops")
		if n == 0 {
			continue
		}
		cpu := r.metrics["cpu-ns/operation"]
		fmt.Fprintf(w, "- simulate <= 15 µs per operation (%d-line add/remove trace on %s, start-up included), issue 15: CPU %s µs per line (start-up %s µs of it), wall-clock %s µs per line: %s\n",
			n, r.machine, us(cpu), us(startup[r.machine]/float64(n)), optUs(r, "ns/operation"), verdict(cpu <= 15000))
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
