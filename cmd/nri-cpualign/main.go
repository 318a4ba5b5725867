// Command nri-cpualign is an NRI plugin for containerd and CRI-O that gives
// latency-critical containers exclusive, topology-aligned CPUs the way the
// kubelet's static CPU manager and topology manager do.
//
// Subcommands:
//
//	run       the NRI plugin daemon (the default)
//	topology  print the CPU topology the plugin sees
//	simulate  what-if placement on a (fake) sysfs tree, JSON Lines in and out
//	version   print the version
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs one subcommand and returns the process exit code.
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sub := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "run":
		return cmdRun(args, stdout, stderr)
	case "topology":
		return cmdTopology(args, stdout, stderr)
	case "simulate":
		return cmdSimulate(args, stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, "usage: nri-cpualign [run|topology|simulate|version] [flags]")
		return 0
	default:
		fmt.Fprintf(stderr, "nri-cpualign: unknown subcommand %q (want run, topology, simulate or version)\n", sub)
		return 2
	}
}
