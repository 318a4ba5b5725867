// Command mkfixture writes the fake sysfs trees of the named fixture
// machines (pkg/sysfs/sysfstest), for `nri-cpualign topology --sysfs-root`,
// `simulate` and manual experiments:
//
//	go run ./cmd/mkfixture -list
//	go run ./cmd/mkfixture -name ht-2s-6c -out /tmp/sys      # /tmp/sys plays /sys
//	go run ./cmd/mkfixture -all -out /tmp/fixtures           # /tmp/fixtures/<name>/...
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mkfixture", flag.ContinueOnError)
	fl.SetOutput(stderr)
	list := fl.Bool("list", false, "list the fixture names and descriptions")
	name := fl.String("name", "", "fixture to write")
	all := fl.Bool("all", false, "write every fixture, one subdirectory per name")
	out := fl.String("out", "", "directory that plays /sys (with -all: parent of one directory per fixture)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "mkfixture: unexpected argument %q\n", fl.Arg(0))
		return 2
	}
	switch {
	case *list:
		for _, n := range sysfstest.Names() {
			s, _ := sysfstest.Get(n)
			fmt.Fprintf(stdout, "%-20s %s\n", n, s.Description)
		}
		return 0
	case *out == "":
		fmt.Fprintln(stderr, "mkfixture: -out DIR is required with -name or -all")
		return 2
	case *all:
		for _, n := range sysfstest.Names() {
			if err := sysfstest.WriteNamed(filepath.Join(*out, n), n); err != nil {
				fmt.Fprintf(stderr, "mkfixture: %s: %v\n", n, err)
				return 1
			}
		}
		return 0
	case *name != "":
		if err := sysfstest.WriteNamed(*out, *name); err != nil {
			fmt.Fprintf(stderr, "mkfixture: %v\n", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintln(stderr, "mkfixture: want -list, -name NAME -out DIR, or -all -out DIR")
		return 2
	}
}
