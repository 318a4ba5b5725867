package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's shape. The Dockerfile's final stage must say the same
// (dockerfile_test.go checks it), so that `docker build` and `make image`
// give images that differ only in timestamps.
const (
	// BinaryPath is where the plugin binary lives in the image.
	BinaryPath = "/usr/bin/nri-cpualign"
	// ImageUser runs the plugin as root: it has to connect to the runtime's
	// NRI socket (root-owned, mode 0700 directory) and write its state
	// directory on the host.
	ImageUser = "0:0"
	// DefaultPathEnv is the PATH a Dockerfile build gives an image whose
	// base sets none (BuildKit adds it to scratch images), repeated here so
	// both builds carry the same environment.
	DefaultPathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	// SourceURL is the org.opencontainers.image.source label.
	SourceURL = "https://github.com/nri-cpualign/nri-cpualign"
	// Description is the org.opencontainers.image.description label.
	Description = "NRI plugin giving Kubernetes containers exclusive, topology-aligned CPUs (the kubelet's static CPU manager and topology manager, for containerd and CRI-O)"
)

// Annotation keys of the layout's index entry.
const (
	// annotationRefName is the OCI layout's tag annotation (skopeo, crane).
	annotationRefName = "org.opencontainers.image.ref.name"
	// annotationImageName is the full reference containerd's importer
	// (`ctr images import`) names the image by.
	annotationImageName = "io.containerd.image.name"
)

// Entrypoint and Cmd of the image: the binary, running `run` unless the
// pod's args say otherwise (args that start with "-" still run `run`).
func Entrypoint() []string { return []string{BinaryPath} }

// Cmd is the image's default argument list.
func Cmd() []string { return []string{"run"} }

// Labels are the image's OCI labels for a version and a VCS revision.
func Labels(version, revision string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "nri-cpualign",
		"org.opencontainers.image.description": Description,
		"org.opencontainers.image.source":      SourceURL,
		"org.opencontainers.image.version":     version,
	}
	if revision != "" {
		l["org.opencontainers.image.revision"] = revision
	}
	return l
}

// Spec is everything the archive is made from.
type Spec struct {
	Binary   []byte    // the static plugin binary
	Name     string    // full image reference, e.g. ghcr.io/x/y:tag
	Arch     string    // GOARCH of Binary
	Version  string    // org.opencontainers.image.version
	Revision string    // org.opencontainers.image.revision, may be empty
	Created  time.Time // image creation time and file mtimes (reproducible builds pass a fixed time)
}

// CheckStatic returns an error unless bin is a statically linked ELF
// executable for arch: the image has no libc and no dynamic loader, so a
// cgo build would fail to start with a confusing "no such file".
func CheckStatic(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("binary is not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("binary is dynamically linked (has a PT_INTERP program header); build it with CGO_ENABLED=0")
		}
	}
	want, ok := map[string]elf.Machine{
		"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
		"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
	}[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q", arch)
	}
	if f.Machine != want {
		return fmt.Errorf("binary is built for %v, not for architecture %q", f.Machine, arch)
	}
	return nil
}

// layerTar is the uncompressed layer: the directories leading to the
// binary, then the binary, all root-owned, with mtime t. The library takes
// a layer as a tar stream; what goes in it is this tool's to say.
func layerTar(bin []byte, t time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := strings.TrimPrefix(path.Dir(BinaryPath), "/")
	var parents []string
	for d := dir; d != "." && d != ""; d = path.Dir(d) {
		parents = append([]string{d}, parents...)
	}
	for _, d := range parents {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: t, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(BinaryPath, "/"), Mode: 0o755, Size: int64(len(bin)), ModTime: t, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseName checks the reference and returns it parsed. The common
// mistakes get their own message; the library checks the rest of the
// grammar (registry, path components, tag characters).
func parseName(ref string) (name.Tag, error) {
	if ref == "" {
		return name.Tag{}, errors.New("image name is empty")
	}
	if strings.Contains(ref, "@") {
		return name.Tag{}, fmt.Errorf("image name %q: a digest reference cannot name a new image", ref)
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		return name.Tag{}, fmt.Errorf("image name %q has no tag (want repository:tag)", ref)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		if repo := ref[:strings.LastIndex(ref, ":")]; repo != strings.ToLower(repo) {
			return name.Tag{}, fmt.Errorf("image name %q: the repository must be lower case: %w", ref, err)
		}
		return name.Tag{}, fmt.Errorf("image name %q: %w", ref, err)
	}
	return tag, nil
}

// tagOf returns the tag of a reference ("latest" when it has none).
func tagOf(ref string) string {
	tag, err := name.NewTag(ref)
	if err != nil {
		return ""
	}
	return tag.TagStr()
}

// Image builds the image s describes: an empty base, one gzip layer with
// the binary, and a config saying how to run it. Its digest depends only
// on s.
func Image(s Spec) (v1.Image, error) {
	if _, err := parseName(s.Name); err != nil {
		return nil, err
	}
	if err := CheckStatic(s.Binary, s.Arch); err != nil {
		return nil, err
	}
	created := s.Created.UTC()
	raw, err := layerTar(s.Binary, created)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	// The stdlib gzip header has no name and no mtime, so the compressed
	// layer (and its digest) depend only on the tar.
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithCompressionLevel(gzip.BestCompression),
		tarball.WithMediaType(types.OCILayer),
	)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	// empty.Image is a Docker-schema image; the archive is an OCI layout,
	// so its manifest and config carry OCI media types.
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	stamp := v1.Time{Time: created}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: stamp, CreatedBy: "COPY nri-cpualign " + BinaryPath + " # tools/mkimage"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = stamp
	cfg.Architecture = s.Arch
	cfg.OS = "linux"
	cfg.Config = v1.Config{
		User:       ImageUser,
		Env:        []string{DefaultPathEnv},
		Entrypoint: Entrypoint(),
		Cmd:        Cmd(),
		WorkingDir: "/",
		Labels:     Labels(s.Version, s.Revision),
	}
	return mutate.ConfigFile(img, cfg)
}

// WriteArchive writes the image as an OCI image layout (oci-layout,
// index.json, blobs/sha256/...) packed in a tar stream to w, the index
// entry naming it s.Name for containerd and by its tag for OCI tools. It
// returns the image's manifest digest.
func WriteArchive(w io.Writer, s Spec) (v1.Hash, error) {
	img, err := Image(s)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "mkimage-layout-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout: %w", err)
	}
	if err := lp.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: s.Arch}),
		layout.WithAnnotations(map[string]string{
			// Verbatim, not the library's normalised name (index.docker.io/...),
			// which containerd spells differently (docker.io/...).
			annotationImageName: s.Name,
			annotationRefName:   tagOf(s.Name),
		}),
	); err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout: %w", err)
	}
	if err := tarDir(w, dir, s.Created.UTC()); err != nil {
		return v1.Hash{}, fmt.Errorf("OCI archive: %w", err)
	}
	return digest, nil
}

// tarDir writes the tree under dir as a tar stream, in lexical order, with
// every entry root-owned, mode 0755 (directories) or 0644 (files) and
// mtime t, so the archive depends on the tree's content only.
func tarDir(w io.Writer, dir string, t time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: t, Format: tar.FormatPAX})
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(data)), ModTime: t, Format: tar.FormatPAX}); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		default:
			return fmt.Errorf("%s: not a regular file or directory", rel)
		}
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
