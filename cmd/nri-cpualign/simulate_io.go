package main

// simulate's input and output without reflection. Decoding a line with
// encoding/json (a Decoder per line, fields matched by reflection) and
// encoding the answer cost more than the engine's decision. The fast
// parser below accepts only the plain form of a request line: one flat
// object, keys spelled exactly as requestLine's tags, string values
// without escapes, integers without sign tricks, booleans and nothing
// else. Anything else (hints, an escape, a key in another case, null,
// an error of any kind) goes to encoding/json as before, so errors and
// every accepted value are what encoding/json gives (FuzzFastRequest
// holds the two together). The encoder writes the common answers as
// json.Marshal does (TestSimulateOutputUnchanged, FuzzAppendAnswer).

import (
	"encoding/json"
	"math/bits"
	"strconv"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/jsonstr"
)

// parseFast fills req from line when line is a request in the plain
// form; false means "use encoding/json" (req is then undefined).
func parseFast(line []byte, req *requestLine) bool {
	p := fastParser{b: line}
	p.space()
	if !p.eat('{') {
		return false
	}
	p.space()
	if p.eat('}') {
		return p.end()
	}
	for {
		key, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if !p.eat(':') {
			return false
		}
		p.space()
		switch string(key) {
		case "op":
			ok = p.strInto(&req.Op)
		case "pod":
			ok = p.strInto(&req.Pod)
		case "container":
			ok = p.strInto(&req.Container)
		case "cpus":
			ok = p.strInto(&req.CPUs)
		case "qos":
			ok = p.strInto(&req.QoS)
		case "container_type":
			ok = p.strInto(&req.ContainerType)
		case "cpu_request_milli":
			ok = p.intInto(&req.CPURequestMilli)
		case "cpu_limit_milli":
			ok = p.intInto(&req.CPULimitMilli)
		case "pod_cpu_request_milli":
			ok = p.intInto(&req.PodCPURequestMilli)
		default:
			return false // hints, affinity_override, unknown or differently cased keys
		}
		if !ok {
			return false
		}
		p.space()
		if p.eat('}') {
			return p.end()
		}
		if !p.eat(',') {
			return false
		}
		p.space()
	}
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end: nothing but white space after the object.
func (p *fastParser) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string of printable ASCII without escapes (encoding/json
// treats invalid UTF-8 and escapes in ways not worth repeating here).
func (p *fastParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *fastParser) strInto(dst *string) bool {
	s, ok := p.str()
	if ok {
		*dst = string(s)
	}
	return ok
}

// intInto reads a JSON integer: -?(0|[1-9][0-9]*), no fraction or
// exponent, within int64.
func (p *fastParser) intInto(dst *int64) bool {
	start := p.i
	p.eat('-')
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return false
	}
	v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

// appendAnswer appends v's JSON as json.Marshal writes it (without the
// newline).
func appendAnswer(b []byte, v any) []byte {
	switch a := v.(type) {
	case addResult:
		if len(a.Devices) > 0 || a.DeviceError != "" {
			break // rare: encoding/json below
		}
		b = append(b, `{"pod":`...)
		b = jsonstr.Append(b, a.Pod)
		b = append(b, `,"container":`...)
		b = jsonstr.Append(b, a.Container)
		b = append(b, `,"cpus":`...)
		b = jsonstr.Append(b, a.CPUs)
		b = append(b, `,"mems":`...)
		b = jsonstr.Append(b, a.Mems)
		b = append(b, `,"exclusive":`...)
		b = strconv.AppendBool(b, a.Exclusive)
		b = append(b, `,"affinity":`...)
		b = appendAffinity(b, a.Affinity)
		if len(a.L3) > 0 {
			b = append(b, `,"l3":`...)
			b = appendInts(b, a.L3)
		}
		if a.PodPool {
			b = append(b, `,"pod_pool":true`...)
		}
		return append(b, '}')
	case removeResult:
		b = append(b, `{"pod":`...)
		b = jsonstr.Append(b, a.Pod)
		b = append(b, `,"container":`...)
		b = jsonstr.Append(b, a.Container)
		b = append(b, `,"removed":`...)
		b = strconv.AppendBool(b, a.Removed)
		return append(b, '}')
	case containerError:
		if len(a.Devices) > 0 || a.DeviceError != "" {
			break
		}
		b = append(b, `{"pod":`...)
		b = jsonstr.Append(b, a.Pod)
		b = append(b, `,"container":`...)
		b = jsonstr.Append(b, a.Container)
		b = append(b, `,"error":`...)
		b = jsonstr.Append(b, a.Error)
		b = append(b, `,"reason":`...)
		b = jsonstr.Append(b, a.Reason)
		if a.Affinity != nil {
			b = append(b, `,"affinity":`...)
			b = appendAffinity(b, *a.Affinity)
		}
		return append(b, '}')
	case errorLine:
		b = append(b, `{"error":`...)
		b = jsonstr.Append(b, a.Error)
		if a.Reason != "" {
			b = append(b, `,"reason":`...)
			b = jsonstr.Append(b, a.Reason)
		}
		if a.Line != 0 {
			b = append(b, `,"line":`...)
			b = strconv.AppendInt(b, int64(a.Line), 10)
		}
		return append(b, '}')
	}
	j, err := json.Marshal(v)
	if err != nil { // only plain structs and maps are marshalled
		j, _ = json.Marshal(errorLine{Error: "internal: " + err.Error(), Reason: "InternalError"})
	}
	return append(b, j...)
}

func appendAffinity(b []byte, a affinityJSON) []byte {
	b = append(b, `{"numa":`...)
	if a.NUMA == nil {
		b = append(b, "null"...)
	} else {
		b = appendInts(b, a.NUMA)
	}
	b = append(b, `,"preferred":`...)
	b = strconv.AppendBool(b, a.Preferred)
	return append(b, '}')
}

func appendInts(b []byte, v []int) []byte {
	b = append(b, '[')
	for i, n := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return append(b, ']')
}

// cpuList is s.String() without sorting: CPU ids below 1024 go through a
// bitmap (a shared-pool answer lists ~250 CPUs on the benchmark machine,
// and the sort was a tenth of an add).
func cpuList(s cpuset.CPUSet) string {
	var words [16]uint64
	ids := s.UnsortedList()
	if len(ids) == 0 {
		return ""
	}
	for _, id := range ids {
		if id < 0 || id >= 64*len(words) {
			return s.String()
		}
		words[id/64] |= 1 << (id % 64)
	}
	b := make([]byte, 0, 4*len(ids))
	start, prev := -1, -2
	flush := func() {
		if start < 0 {
			return
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(start), 10)
		if prev != start {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(prev), 10)
		}
	}
	for w, word := range words {
		for word != 0 {
			id := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			if id != prev+1 {
				flush()
				start = id
			}
			prev = id
		}
	}
	flush()
	return string(b)
}
