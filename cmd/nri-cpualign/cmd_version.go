package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
)

// cmdVersion is `nri-cpualign version`: what this binary is.
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nri-cpualign version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	output := outputFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nri-cpualign version [-o text|json]\n\nPrints the version, git revision, build date, Go version and NRI module and protocol. Flags:")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if !checkOutput(fs, *output) {
		return exitUsage
	}
	info := buildinfo.Read()
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
			fmt.Fprintf(stderr, "nri-cpualign version: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	_, err := fmt.Fprintf(stdout, "nri-cpualign %s\n  revision:     %s\n  build date:   %s\n  go:           %s\n  nri module:   %s\n  nri protocol: %s\n",
		info.Version, info.Revision, info.Date, info.GoVersion, info.NRIModule, info.NRIProtocol)
	if err != nil {
		return exitFailed
	}
	return exitOK
}

// parseFlags parses args into fs; done means the command is over with
// code: -h asked for the flags (0), or the flags were bad (2), or an
// argument was left over (2).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, true
		}
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, true
	}
	return 0, false
}

// outputFlag registers --output and its short -o (text or json), as
// status and version take them.
func outputFlag(fs *flag.FlagSet) *string {
	output := fs.String("output", "text", "output format: text or json")
	fs.StringVar(output, "o", "text", "short for --output")
	return output
}

// checkOutput reports whether output is a format outputFlag allows, and
// says why not on fs's output.
func checkOutput(fs *flag.FlagSet, output string) bool {
	if output == "text" || output == "json" {
		return true
	}
	fmt.Fprintf(fs.Output(), "%s: --output %q: want text or json\n", fs.Name(), output)
	return false
}
