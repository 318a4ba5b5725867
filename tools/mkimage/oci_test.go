package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// makeELF builds a minimal little-endian ELF64 executable header for
// machine, with a PT_INTERP program header when dynamic is set (what a cgo
// build has), followed by some payload bytes.
func makeELF(t *testing.T, machine elf.Machine, dynamic bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	phnum := uint16(0)
	if dynamic {
		phnum = 1
	}
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: phnum,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if err := binary.Write(&buf, binary.LittleEndian, hdr); err != nil {
		t.Fatal(err)
	}
	if dynamic {
		if err := binary.Write(&buf, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: 120, Filesz: 8, Memsz: 8}); err != nil {
			t.Fatal(err)
		}
	}
	buf.WriteString("payload-bytes-of-the-binary")
	return buf.Bytes()
}

// The OCI image-spec documents as the test reads them, written from the
// spec rather than taken from the library that wrote them.
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

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(s[:])
}

// readArchive unpacks an OCI layout tar into path -> content, checking the
// tar itself on the way (no duplicate names, only regular files and dirs).
func readArchive(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			t.Fatalf("archive: %s has type %c, want a regular file", h.Name, h.Typeflag)
		}
		if _, dup := files[h.Name]; dup {
			t.Fatalf("archive: %s appears twice", h.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	return files
}

// blobOf returns the blob a descriptor points at, checking that its digest
// and size are right.
func blobOf(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s (%s) is missing from the archive", d.Digest, d.MediaType)
	}
	if got := sha(b); got != d.Digest {
		t.Fatalf("blob %s has digest %s", d.Digest, got)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s is %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	return b
}

func TestWriteArchiveIsAValidOCILayout(t *testing.T) {
	bin := makeELF(t, elf.EM_X86_64, false)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	spec := Spec{Binary: bin, Name: "registry.example.com/team/nri-cpualign:v1.2.3", Arch: "amd64", Version: "v1.2.3", Revision: "abc123", Created: created}
	var out bytes.Buffer
	digest, err := WriteArchive(&out, spec)
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out.Bytes())

	var layout struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil || layout.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("oci-layout = %q (%v), want imageLayoutVersion 1.0.0", files["oci-layout"], err)
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != mediaTypeIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: schemaVersion %d, mediaType %q with %d manifests, want 2, an OCI index, 1", idx.SchemaVersion, idx.MediaType, len(idx.Manifests))
	}
	md := idx.Manifests[0]
	if md.MediaType != mediaTypeManifest || md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != "amd64" {
		t.Errorf("index entry = %+v, want an OCI manifest for linux/amd64", md)
	}
	if md.Digest != digest.String() {
		t.Errorf("index entry digest %s, WriteArchive returned %s", md.Digest, digest)
	}
	// ctr names the image by io.containerd.image.name; OCI tools by the tag.
	if got := md.Annotations[annotationImageName]; got != spec.Name {
		t.Errorf("%s = %q, want %q", annotationImageName, got, spec.Name)
	}
	if got := md.Annotations[annotationRefName]; got != "v1.2.3" {
		t.Errorf("%s = %q, want the tag v1.2.3", annotationRefName, got)
	}

	var man manifest
	if err := json.Unmarshal(blobOf(t, files, md), &man); err != nil {
		t.Fatal(err)
	}
	if man.SchemaVersion != 2 || man.MediaType != mediaTypeManifest || man.Config.MediaType != mediaTypeConfig || len(man.Layers) != 1 || man.Layers[0].MediaType != mediaTypeLayerGz {
		t.Fatalf("manifest = %+v, want one config and one gzip layer", man)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blobOf(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}

	zr, err := gzip.NewReader(bytes.NewReader(blobOf(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	// The config's diff_id is the digest of the uncompressed layer.
	if want := []string{sha(layer)}; !reflect.DeepEqual(cfg.RootFS.DiffIDs, want) || cfg.RootFS.Type != "layers" {
		t.Errorf("rootfs = %+v, want layers %v", cfg.RootFS, want)
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) {
			t.Errorf("layer entry %s: uid %d gid %d mtime %v, want root-owned at %v", h.Name, h.Uid, h.Gid, h.ModTime, created)
		}
		if h.Name == "usr/bin/nri-cpualign" {
			got, _ := io.ReadAll(tr)
			if !bytes.Equal(got, bin) || h.Mode != 0o755 || h.Typeflag != tar.TypeReg {
				t.Errorf("layer binary: mode %o, %d bytes, want the input binary (%d bytes) with mode 755", h.Mode, len(got), len(bin))
			}
		}
	}
	if want := []string{"usr/", "usr/bin/", "usr/bin/nri-cpualign"}; !reflect.DeepEqual(names, want) {
		t.Errorf("layer entries = %q, want %q", names, want)
	}
	// Nothing else in the archive (no temporary files of the writer).
	want := map[string]bool{"oci-layout": true, "index.json": true}
	for _, d := range []descriptor{md, man.Config, man.Layers[0]} {
		want["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")] = true
	}
	for f := range files {
		if !want[f] {
			t.Errorf("archive holds %s, which no descriptor names", f)
		}
	}

	if cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.Created != "2026-01-02T03:04:05Z" {
		t.Errorf("config os/arch/created = %s/%s/%s", cfg.OS, cfg.Architecture, cfg.Created)
	}
	if len(cfg.History) != 1 || cfg.History[0].Created != "2026-01-02T03:04:05Z" || !strings.Contains(cfg.History[0].CreatedBy, "/usr/bin/nri-cpualign") {
		t.Errorf("config history = %+v, want one entry at the created time copying the binary", cfg.History)
	}
	rc := cfg.Config
	if rc.User != "0:0" || !reflect.DeepEqual(rc.Entrypoint, []string{"/usr/bin/nri-cpualign"}) || !reflect.DeepEqual(rc.Cmd, []string{"run"}) {
		t.Errorf("config user/entrypoint/cmd = %q %q %q, want root running /usr/bin/nri-cpualign run", rc.User, rc.Entrypoint, rc.Cmd)
	}
	if want := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}; !reflect.DeepEqual(rc.Env, want) || rc.WorkingDir != "/" {
		t.Errorf("config env/workdir = %q %q, want %q /", rc.Env, rc.WorkingDir, want)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.title":    "nri-cpualign",
		"org.opencontainers.image.source":   "https://github.com/nri-cpualign/nri-cpualign",
	} {
		if rc.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, rc.Labels[k], want)
		}
	}
}

func TestWriteArchiveIsReproducible(t *testing.T) {
	spec := Spec{Binary: makeELF(t, elf.EM_AARCH64, false), Name: "x/y:z", Arch: "arm64", Version: "v1", Created: time.Unix(1700000000, 0)}
	write := func(s Spec) ([]byte, string) {
		t.Helper()
		var buf bytes.Buffer
		d, err := WriteArchive(&buf, s)
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), d.String()
	}
	a, da := write(spec)
	b, db := write(spec)
	if !bytes.Equal(a, b) || da != db {
		t.Fatalf("two archives of the same inputs differ (digests %s, %s)", da, db)
	}
	other := spec
	other.Binary = append(append([]byte(nil), spec.Binary...), 'x')
	if c, dc := write(other); bytes.Equal(a, c) || da == dc {
		t.Fatal("a different binary gave the same archive")
	}
	other = spec
	other.Created = spec.Created.Add(time.Second)
	if c, dc := write(other); bytes.Equal(a, c) || da == dc {
		t.Fatal("a different -created gave the same archive")
	}
}

func TestWriteArchiveRefuses(t *testing.T) {
	static := makeELF(t, elf.EM_X86_64, false)
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"dynamic binary", Spec{Binary: makeELF(t, elf.EM_X86_64, true), Name: "a/b:c", Arch: "amd64"}, "CGO_ENABLED=0"},
		{"wrong architecture", Spec{Binary: static, Name: "a/b:c", Arch: "arm64"}, `not for architecture "arm64"`},
		{"unknown architecture", Spec{Binary: static, Name: "a/b:c", Arch: "mips"}, `unsupported architecture "mips"`},
		{"not an ELF file", Spec{Binary: []byte("#!/bin/sh\necho hi\n"), Name: "a/b:c", Arch: "amd64"}, "not an ELF executable"},
		{"no tag", Spec{Binary: static, Name: "registry:5000/a/b", Arch: "amd64"}, "has no tag"},
		{"digest", Spec{Binary: static, Name: "a/b@sha256:00", Arch: "amd64"}, "digest reference"},
		{"upper case", Spec{Binary: static, Name: "A/b:c", Arch: "amd64"}, "lower case"},
		{"empty name", Spec{Binary: static, Arch: "amd64"}, "empty"},
		{"space in the repository", Spec{Binary: static, Name: "a/b c:d", Arch: "amd64"}, `image name "a/b c:d": repository can only contain`},
		{"bad tag", Spec{Binary: static, Name: "a/b:c!", Arch: "amd64"}, `image name "a/b:c!"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WriteArchive(io.Discard, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("WriteArchive error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestTagOf(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/nri-cpualign/nri-cpualign:latest": "latest",
		"localhost:5000/nri-cpualign:v1":           "v1",
		"localhost:5000/nri-cpualign":              "latest",
	} {
		if got := tagOf(ref); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestRunWritesArchiveAtomically(t *testing.T) {
	dir := t.TempDir()
	binPath := filepath.Join(dir, "nri-cpualign")
	if err := os.WriteFile(binPath, makeELF(t, elf.EM_X86_64, false), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "image.tar")
	var stderr bytes.Buffer
	if code := run([]string{"-binary", binPath, "-name", "a/b:c", "-arch", "amd64", "-created", "0", "-o", out}, &stderr); code != 0 {
		t.Fatalf("run = %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}

	// A refused binary leaves neither the archive nor a temp file behind.
	bad := filepath.Join(dir, "dyn")
	if err := os.WriteFile(bad, makeELF(t, elf.EM_X86_64, true), 0o755); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "out2", "image.tar")
	stderr.Reset()
	if code := run([]string{"-binary", bad, "-name", "a/b:c", "-arch", "amd64", "-o", out2}, &stderr); code != 1 || !strings.Contains(stderr.String(), "dynamically linked") {
		t.Fatalf("run with a dynamic binary = %d, %q; want 1 and the reason", code, stderr.String())
	}
	if entries, _ := os.ReadDir(filepath.Dir(out2)); len(entries) != 0 {
		t.Fatalf("failed run left %d files in the output directory", len(entries))
	}

	stderr.Reset()
	if code := run([]string{"-binary", binPath, "-o", out}, &stderr); code != 2 {
		t.Fatalf("run without -name = %d, want 2", code)
	}
	stderr.Reset()
	if code := run([]string{"-binary", binPath, "-name", "a/b:c", "-o", out, "-created", "yesterday"}, &stderr); code != 2 || !strings.Contains(stderr.String(), `-created "yesterday"`) {
		t.Fatalf("run with a bad -created = %d, %q", code, stderr.String())
	}
}
