// Command nri-cpualign is an NRI plugin for containerd and CRI-O that gives
// latency-critical containers exclusive, topology-aligned CPUs the way the
// kubelet's static CPU manager and topology manager do.
//
// `nri-cpualign help` lists the subcommands (run, status, topology,
// simulate, version); `nri-cpualign SUBCOMMAND -h` lists one's flags.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/containerd/nri/pkg/api"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// commands are the subcommands in the order help lists them, each with
// its one-line summary.
var commands = []struct{ name, summary string }{
	{"run", "run the NRI plugin (what the DaemonSet and the runtime start)"},
	{"status", "show a running plugin's shared pool, reserved CPUs and pinned containers"},
	{"topology", "print the CPU topology the plugin sees"},
	{"simulate", "what-if placement on a (fake) sysfs tree, JSON Lines in and out"},
	{"version", "print the version, git revision, build date, Go and NRI versions"},
	{"help", "print this help"},
}

// printHelp writes the top-level help.
func printHelp(w io.Writer) {
	fmt.Fprint(w, `nri-cpualign gives Kubernetes containers exclusive, topology-aligned CPUs: the
kubelet's static CPU manager and topology manager, as an NRI plugin for
containerd and CRI-O.

Usage: nri-cpualign COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
"nri-cpualign COMMAND -h" lists the flags of COMMAND.

A runtime that starts the plugin itself (nri-cpualign installed in its NRI
plugin directory) runs it without arguments and with %s set
to the socket it connected; nri-cpualign without arguments then runs "run".
Without that variable (a person at a terminal) it prints this help.
`, api.PluginSocketEnvVar)
}

// dispatch runs one subcommand and returns the process exit code.
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return dispatchEnv(args, os.Getenv, stdin, stdout, stderr)
}

// dispatchEnv is dispatch with the environment passed in, for tests.
func dispatchEnv(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		if getenv(api.PluginSocketEnvVar) != "" {
			// Launched by the runtime as a pre-registered plugin.
			return cmdRun(nil, stdout, stderr)
		}
		// Asked for nothing: the help, but as a usage error, so that a
		// manifest or script that lost its "run" fails visibly instead
		// of exiting 0.
		printHelp(stderr)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "topology":
		return cmdTopology(rest, stdout, stderr)
	case "simulate":
		return cmdSimulate(rest, stdin, stdout, stderr)
	case "version":
		return cmdVersion(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		printHelp(stdout)
		return exitOK
	}
	if sub[0] == '-' {
		fmt.Fprintf(stderr, "nri-cpualign: flag %s before a command: flags follow the command, e.g. \"nri-cpualign run %s\"; \"nri-cpualign help\" lists the commands\n", sub, sub)
		return exitUsage
	}
	fmt.Fprintf(stderr, "nri-cpualign: unknown command %q; \"nri-cpualign help\" lists the commands\n", sub)
	return exitUsage
}
