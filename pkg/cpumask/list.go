package cpumask

import "k8s.io/utils/cpuset"

// SameList reports whether two cpu or NUMA node lists ("0-3,8") name the
// same set, however they are written; a list that does not parse is
// never the same as anything.
func SameList(a, b string) bool {
	x, err1 := cpuset.Parse(a)
	y, err2 := cpuset.Parse(b)
	return err1 == nil && err2 == nil && x.Equals(y)
}
