package main

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, LABEL, ...
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// finalStage returns the instructions after the last FROM, and that FROM's
// argument.
func finalStage(ins []instruction) (from string, stage []instruction) {
	for i := len(ins) - 1; i >= 0; i-- {
		if ins[i].cmd == "FROM" {
			return ins[i].args, ins[i+1:]
		}
	}
	return "", nil
}

// labelRe matches one key="value" pair of a LABEL instruction.
var labelRe = regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`)

// TestDockerfileMatchesMkimage keeps the two builds of the image in step:
// the Dockerfile (for users with a container engine) and tools/mkimage
// (`make image`, no engine) must give the same filesystem, user,
// entrypoint, command and labels.
func TestDockerfileMatchesMkimage(t *testing.T) {
	// The linker stamps what `nri-cpualign version` prints (internal/buildinfo).
	const bi = "github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
	const buildFlags = `-ldflags "-s -w -X ` + bi + `.version=${VERSION} -X ` + bi + `.revision=${REVISION} -X ` + bi + `.date=${BUILD_DATE}"`
	ins := parseDockerfile(t, "../../Dockerfile")
	from, stage := finalStage(ins)
	if from != "scratch" {
		t.Errorf("final stage is FROM %q; mkimage builds on an empty base, so the Dockerfile must use scratch", from)
	}
	var buildRun string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			buildRun = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", buildFlags, "./cmd/nri-cpualign"} {
		if !strings.Contains(buildRun, want) {
			t.Errorf("the Dockerfile's go build (%q) lacks %s, which scripts/image.sh uses", buildRun, want)
		}
	}
	script, err := os.ReadFile("../../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", buildFlags, "./cmd/nri-cpualign"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("scripts/image.sh lacks %s, which the Dockerfile's build uses", want)
		}
	}

	got := map[string]string{}
	labels := map[string]string{}
	var copies []string
	for _, in := range stage {
		switch in.cmd {
		case "USER", "ENTRYPOINT", "CMD":
			got[in.cmd] = in.args
		case "COPY":
			copies = append(copies, in.args)
		case "LABEL":
			for _, m := range labelRe.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = m[2]
			}
		case "ARG", "ENV":
			if in.cmd == "ENV" {
				t.Errorf("final stage sets ENV %s, which mkimage does not", in.args)
			}
		default:
			t.Errorf("final stage has %s %s, which mkimage does not reproduce", in.cmd, in.args)
		}
	}
	if got["USER"] != ImageUser {
		t.Errorf("Dockerfile USER %q, mkimage %q", got["USER"], ImageUser)
	}
	for _, c := range []struct {
		cmd  string
		want []string
	}{{"ENTRYPOINT", Entrypoint()}, {"CMD", Cmd()}} {
		var list []string
		if err := json.Unmarshal([]byte(got[c.cmd]), &list); err != nil {
			t.Errorf("Dockerfile %s %q is not in exec (JSON) form: %v", c.cmd, got[c.cmd], err)
		} else if !reflect.DeepEqual(list, c.want) {
			t.Errorf("Dockerfile %s %q, mkimage %q", c.cmd, list, c.want)
		}
	}
	if want := "--from=build /out/nri-cpualign " + BinaryPath; len(copies) != 1 || copies[0] != want {
		t.Errorf("final stage COPY %q, want exactly %q (mkimage's only layer)", copies, want)
	}

	// Same label keys; fixed values equal; build-arg values are the args.
	wantLabels := Labels("${VERSION}", "${REVISION}")
	var gotKeys, wantKeys []string
	for k := range labels {
		gotKeys = append(gotKeys, k)
	}
	for k := range wantLabels {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(gotKeys)
	sort.Strings(wantKeys)
	if !reflect.DeepEqual(gotKeys, wantKeys) {
		t.Fatalf("Dockerfile labels %q, mkimage labels %q", gotKeys, wantKeys)
	}
	for k, want := range wantLabels {
		if labels[k] != want {
			t.Errorf("label %s: Dockerfile %q, mkimage %q", k, labels[k], want)
		}
	}
}
