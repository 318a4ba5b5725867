package main

import (
	"fmt"
	"io"
)

// cmdSimulate is being written (placeholder so the binary builds).
func cmdSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "nri-cpualign: simulate: not implemented yet")
	return 1
}
