package main

import (
	"fmt"
	"io"
)

// cmdTopology is being written (placeholder so the binary builds).
func cmdTopology(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "nri-cpualign: topology: not implemented yet")
	return 1
}
