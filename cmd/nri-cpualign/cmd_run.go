package main

import (
	"fmt"
	"io"
)

// cmdRun is being written (placeholder so the binary builds).
func cmdRun(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "nri-cpualign: run: not implemented yet")
	return 1
}
