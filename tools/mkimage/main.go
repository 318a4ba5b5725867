// Command mkimage packs the static nri-cpualign binary into an OCI image
// archive without a container engine: an empty base plus one layer with the
// binary at /usr/bin/nri-cpualign, the same image the Dockerfile builds.
// The archive imports with `ctr -n k8s.io images import`, `skopeo copy
// oci-archive:...` or `crane push`. `make image` runs it (scripts/image.sh).
//
//	go run ./tools/mkimage -binary _output/image/nri-cpualign \
//	    -name ghcr.io/nri-cpualign/nri-cpualign:latest -o _output/nri-cpualign-image.tar
//
// The output depends only on its inputs: file times and the image's created
// time come from -created (default $SOURCE_DATE_EPOCH, else 0), so the same
// binary gives the same image digest, which it prints. The image is built
// with go-containerregistry (empty base, mutate, OCI layout); this tool
// only decides the layer's files and packs the layout directory into a tar.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binary := fs.String("binary", "", "the static nri-cpualign binary to pack (required)")
	name := fs.String("name", "", "image reference repository:tag (required)")
	out := fs.String("o", "", "output OCI archive (required)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
	version := fs.String("version", "dev", "org.opencontainers.image.version label")
	revision := fs.String("revision", "", "org.opencontainers.image.revision label (VCS commit)")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *binary == "" || *name == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mkimage: -binary, -name and -o are required, and no other arguments")
		fs.Usage()
		return 2
	}
	t := time.Unix(0, 0)
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil || sec < 0 {
			fmt.Fprintf(stderr, "mkimage: -created %q: want Unix seconds >= 0\n", *created)
			return 2
		}
		t = time.Unix(sec, 0)
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	digest, err := writeFile(*out, Spec{Binary: bin, Name: *name, Arch: *arch, Version: *version, Revision: *revision, Created: t})
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %s: %v\n", *binary, err)
		return 1
	}
	fmt.Fprintf(stderr, "mkimage: wrote %s (%s) manifest %s\n", *out, *name, digest)
	return 0
}

// writeFile writes the archive next to path and renames it into place, so a
// failed run never leaves a truncated archive behind for ctr to import.
func writeFile(path string, s Spec) (v1.Hash, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return v1.Hash{}, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".mkimage-*")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(f.Name())
	digest, err := WriteArchive(f, s)
	if err != nil {
		f.Close()
		return v1.Hash{}, err
	}
	if err := f.Close(); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}
