package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
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

// OCI media types and annotation keys used in the archive.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"

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

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Created      string        `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Config       runtimeConfig `json:"config"`
	RootFS       rootFS        `json:"rootfs"`
	History      []history     `json:"history"`
}

type runtimeConfig struct {
	User       string            `json:"User"`
	Env        []string          `json:"Env"`
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	WorkingDir string            `json:"WorkingDir"`
	Labels     map[string]string `json:"Labels"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// blob is one content-addressed file of the layout.
type blob struct {
	digest string // "sha256:<hex>"
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
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
// binary, then the binary, all root-owned, with mtime t.
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

func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	// The gzip header carries no name and no mtime, so the output depends
	// only on the input: the same binary gives the same layer digest.
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tagOf returns the tag of a reference ("latest" when it has none).
func tagOf(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return "latest"
}

// validName checks the reference enough to catch typos: a lower-case
// repository path and an explicit tag, no digest.
func validName(ref string) error {
	if ref == "" {
		return errors.New("image name is empty")
	}
	if strings.Contains(ref, "@") {
		return fmt.Errorf("image name %q: a digest reference cannot name a new image", ref)
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if !strings.Contains(last, ":") {
		return fmt.Errorf("image name %q has no tag (want repository:tag)", ref)
	}
	repo := ref[:len(ref)-len(tagOf(ref))-1]
	if repo != strings.ToLower(repo) || strings.ContainsAny(repo, " \t") {
		return fmt.Errorf("image name %q: the repository must be lower case without spaces", ref)
	}
	return nil
}

// WriteArchive writes an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) as a tar stream to w: one gzip layer holding the
// binary, the image config and the manifest, named s.Name.
func WriteArchive(w io.Writer, s Spec) error {
	if err := validName(s.Name); err != nil {
		return err
	}
	if err := CheckStatic(s.Binary, s.Arch); err != nil {
		return err
	}
	created := s.Created.UTC()
	layer, err := layerTar(s.Binary, created)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	diffID := newBlob(layer).digest
	gz, err := gzipBytes(layer)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	layerBlob := newBlob(gz)

	stamp := created.Format(time.RFC3339)
	cfgJSON, err := json.Marshal(imageConfig{
		Created:      stamp,
		Architecture: s.Arch,
		OS:           "linux",
		Config: runtimeConfig{
			User:       ImageUser,
			Env:        []string{DefaultPathEnv},
			Entrypoint: Entrypoint(),
			Cmd:        Cmd(),
			WorkingDir: "/",
			Labels:     Labels(s.Version, s.Revision),
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []history{{Created: stamp, CreatedBy: "COPY nri-cpualign " + BinaryPath + " # tools/mkimage"}},
	})
	if err != nil {
		return err
	}
	cfgBlob := newBlob(cfgJSON)

	manJSON, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: cfgBlob.digest, Size: int64(len(cfgBlob.data))},
		Layers:        []descriptor{{MediaType: mediaTypeLayerGz, Digest: layerBlob.digest, Size: int64(len(layerBlob.data))}},
	})
	if err != nil {
		return err
	}
	manBlob := newBlob(manJSON)

	idxJSON, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    manBlob.digest,
			Size:      int64(len(manBlob.data)),
			Platform:  &platform{Architecture: s.Arch, OS: "linux"},
			Annotations: map[string]string{
				annotationImageName: s.Name,
				annotationRefName:   tagOf(s.Name),
			},
		}},
	})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	file := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: created, Format: tar.FormatPAX})
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file("index.json", idxJSON); err != nil {
		return err
	}
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	for _, b := range []blob{layerBlob, cfgBlob, manBlob} {
		if err := file("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
