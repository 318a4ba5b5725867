package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ignoreRule is one .dockerignore line as a regular expression over
// slash-separated paths relative to the build context.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// parseDockerignore reads .dockerignore the way the Docker builder does:
// comments and blank lines skipped, "!" re-includes, "**" matches any number
// of directories, "*" and "?" stay within one path element, and a pattern
// that matches a directory excludes everything below it.
func parseDockerignore(r io.Reader) ([]ignoreRule, error) {
	var rules []ignoreRule
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rule := ignoreRule{}
		if strings.HasPrefix(line, "!") {
			rule.negate, line = true, line[1:]
		}
		line = strings.Trim(filepath.ToSlash(filepath.Clean(line)), "/")
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				b.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				b.WriteString(".*")
				i++
			case line[i] == '*':
				b.WriteString("[^/]*")
			case line[i] == '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		b.WriteString("(/.*)?$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, err
		}
		rule.re = re
		rules = append(rules, rule)
	}
	return rules, sc.Err()
}

// excluded reports whether the context path p (slash-separated) is left out
// of the build context; the last matching rule wins.
func excluded(rules []ignoreRule, p string) bool {
	out := false
	for _, r := range rules {
		if r.re.MatchString(p) {
			out = !r.negate
		}
	}
	return out
}

func TestDockerignoreMatcher(t *testing.T) {
	rules, err := parseDockerignore(strings.NewReader("# c\n.git\n**/*_test.go\nbin\n!bin/keep\nsub/*.txt\n"))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		".git": true, ".git/HEAD": true, ".github/x": false,
		"a_test.go": true, "pkg/x/a_test.go": true, "pkg/x/a.go": false,
		"bin/nri-cpualign": true, "bin/keep": false, "cmd/bin.go": false,
		"sub/a.txt": true, "sub/deeper/a.txt": false,
	} {
		if got := excluded(rules, p); got != want {
			t.Errorf("excluded(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestDockerignoreKeepsTheBuildInputs checks, without a container engine,
// that the Docker build context still holds every file `go build
// ./cmd/nri-cpualign` reads from this module: go.mod, go.sum, and each
// package's Go, embedded and other source files.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	f, err := os.Open("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := parseDockerignore(f)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json", "./cmd/nri-cpualign")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	type pkg struct {
		ImportPath string
		Dir        string
		Module     *struct{ Path string }
		GoFiles    []string
		EmbedFiles []string
		SFiles     []string
		OtherFiles []string
	}
	need := []string{"go.mod", "go.sum", "cmd/nri-cpualign/main.go"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	ours := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != "github.com/nri-cpualign/nri-cpualign" {
			continue
		}
		ours++
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range [][]string{p.GoFiles, p.EmbedFiles, p.SFiles, p.OtherFiles} {
			for _, name := range list {
				need = append(need, filepath.ToSlash(filepath.Join(rel, name)))
			}
		}
	}
	if ours < 3 {
		t.Fatalf("go list found %d packages of this module behind cmd/nri-cpualign; the listing is wrong", ours)
	}
	for _, p := range need {
		if excluded(rules, p) {
			t.Errorf(".dockerignore leaves %s out of the build context, but go build ./cmd/nri-cpualign needs it", p)
		}
	}
	// And it does keep the bulky things out.
	for _, p := range []string{".git/HEAD", "_output/nri-cpualign-image.tar", "bin/nri-cpualign", "pkg/config/config_test.go"} {
		if !excluded(rules, p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
}
