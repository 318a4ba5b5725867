package allocator

import "fmt"

// Reason words of the allocator's errors, as the kubelet names them.
const (
	ReasonSMTAlignment     = "SMTAlignmentError"
	ReasonInsufficientCPUs = "InsufficientCPUs"
	ReasonInvalidState     = "InvalidState"
	ReasonInvalidOptions   = "InvalidConfig"
)

// SMTAlignmentError rejects a request under full-pcpus-only: either it is
// not a multiple of the CPUs per core, or (CausedByPhysicalCPUs) there are
// not enough free CPUs once every thread sibling of a reserved CPU is
// counted as unavailable.
type SMTAlignmentError struct {
	RequestedCPUs         int
	CpusPerCore           int
	AvailablePhysicalCPUs int
	CausedByPhysicalCPUs  bool
}

// Error starts with the reason word and carries the kubelet's numbers.
func (e *SMTAlignmentError) Error() string {
	if e.CausedByPhysicalCPUs {
		return fmt.Sprintf("%s: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d",
			ReasonSMTAlignment, e.AvailablePhysicalCPUs, e.RequestedCPUs, e.CpusPerCore)
	}
	return fmt.Sprintf("%s: requested %d cpus not multiple cpus per core = %d", ReasonSMTAlignment, e.RequestedCPUs, e.CpusPerCore)
}

// Reason is "SMTAlignmentError".
func (e *SMTAlignmentError) Reason() string { return ReasonSMTAlignment }

// InsufficientCPUsError is a request larger than the CPUs that may be
// handed out (Available counts the assignable CPUs plus the pod's reusable
// ones).
type InsufficientCPUsError struct {
	Requested int
	Available int
}

// Error starts with the reason word.
func (e *InsufficientCPUsError) Error() string {
	return fmt.Sprintf("%s: not enough cpus available to satisfy request: requested=%d, available=%d",
		ReasonInsufficientCPUs, e.Requested, e.Available)
}

// Reason is "InsufficientCPUs".
func (e *InsufficientCPUsError) Reason() string { return ReasonInsufficientCPUs }

// InvalidStateError is an assignment or state that breaks the pool rules:
// a CPU offline, reserved, held by another container, or a violated
// invariant.
type InvalidStateError struct {
	// Pod and Container name the assignment at fault, when there is one.
	Pod, Container string
	// Msg says what is wrong.
	Msg string
}

// Error starts with the reason word and names the assignment at fault.
func (e *InvalidStateError) Error() string {
	if e.Pod != "" || e.Container != "" {
		return fmt.Sprintf("%s: pod %q container %q: %s", ReasonInvalidState, e.Pod, e.Container, e.Msg)
	}
	return ReasonInvalidState + ": " + e.Msg
}

// Reason is "InvalidState".
func (e *InvalidStateError) Reason() string { return ReasonInvalidState }

// OptionsError is an unknown, badly valued or incompatible static-policy
// option. Option names the offending option (the first of an incompatible
// pair); Err says why.
type OptionsError struct {
	Option string
	Err    error
}

// Error starts with the reason word.
func (e *OptionsError) Error() string { return ReasonInvalidOptions + ": " + e.Err.Error() }

// Unwrap returns the underlying cause.
func (e *OptionsError) Unwrap() error { return e.Err }

// Reason is "InvalidConfig".
func (e *OptionsError) Reason() string { return ReasonInvalidOptions }

var (
	_ Reasoner = (*SMTAlignmentError)(nil)
	_ Reasoner = (*InsufficientCPUsError)(nil)
	_ Reasoner = (*InvalidStateError)(nil)
	_ Reasoner = (*OptionsError)(nil)
)
