// Package archtest checks the layout docs/architecture.md describes: the
// imports it forbids (read from the document's "imports" block, so the
// page and the check cannot drift apart), the size of the daemon's
// structs and of the binary's packages.
package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is the module's path; rules name packages relative to it.
const module = "github.com/nri-cpualign/nri-cpualign"

// rule forbids packages matching from to import (directly or through
// others) packages matching to.
type rule struct{ from, to string }

// match reports whether pkg (a full import path) matches pattern: a path
// relative to the module or a full one, "/..." matching it and what is
// below it.
func match(pattern, pkg string) bool {
	full := pattern
	if !strings.Contains(strings.SplitN(pattern, "/", 2)[0], ".") {
		full = module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(full, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == full
}

// repoRoot is the module's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// docRules reads the rules of docs/architecture.md's imports block: lines
// "FROM must not import TO" inside a ```imports fence.
func docRules(t *testing.T, root string) []rule {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []rule
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```imports":
			in = true
		case in && line == "```":
			in = false
		case in && line != "":
			from, to, ok := strings.Cut(line, " must not import ")
			if !ok {
				t.Fatalf("docs/architecture.md imports block: %q is not \"FROM must not import TO\"", line)
			}
			rules = append(rules, rule{strings.TrimSpace(from), strings.TrimSpace(to)})
		}
	}
	// The block must not quietly disappear.
	if len(rules) < 8 {
		t.Fatalf("docs/architecture.md lists %d import rules in its imports block, want the whole list", len(rules))
	}
	return rules
}

// listed is one package as go list -deps -test -json prints it.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Standard   bool
	ForTest    string
	Imports    []string
	Deps       []string
}

// TestImportRules fails when a package imports, directly or through
// another package, one that docs/architecture.md forbids it. Test code
// counts: a package's tests are built with it (go list -test).
func TestImportRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	root := repoRoot(t)
	rules := docRules(t, root)
	seen := 0
	for _, p := range modulePackages(t, root, "-test", "./...") {
		// "pkg [pkg.test]" is pkg built with its tests.
		name, _, _ := strings.Cut(p.ImportPath, " ")
		if strings.HasSuffix(name, ".test") {
			continue // the generated test main
		}
		seen++
		for _, r := range rules {
			if !match(r.from, name) {
				continue
			}
			for _, dep := range p.Deps {
				dep, _, _ = strings.Cut(dep, " ")
				if match(r.to, dep) && dep != name {
					t.Errorf("%s imports %s: docs/architecture.md says %s must not import %s", p.ImportPath, dep, r.from, r.to)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("go list printed none of the module's packages")
	}
}

// modulePackages is `go list -deps -json args...` run in root, the
// module's own packages of it.
func modulePackages(t *testing.T, root string, args ...string) []listed {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json"}, args...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if !p.Standard && strings.HasPrefix(p.ImportPath, module) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// maxFields is the most fields a struct of the daemon's packages may
// have; collectors (metric sets registered as a whole) are exempt.
const maxFields = 12

var exempt = map[string]string{
	"internal/daemon.metrics": "the daemon's metric collectors",
}

// TestStructSize fails when a struct of the daemon's packages has more
// than maxFields fields: state that grows past it wants a type of its own
// (the ledger's conf, durable and lifecycle are the example).
func TestStructSize(t *testing.T) {
	root := repoRoot(t)
	for _, dir := range []string{"internal/daemon", "internal/adapter", "internal/applier", "internal/ledger", "internal/persist", "internal/observe", "internal/request"} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, e.Name()), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				spec, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := spec.Type.(*ast.StructType)
				if !ok {
					return true
				}
				if _, ok := exempt[dir+"."+spec.Name.Name]; ok {
					return true
				}
				count := 0
				for _, fld := range st.Fields.List {
					count += max(len(fld.Names), 1)
				}
				if count > maxFields {
					t.Errorf("%s: struct %s has %d fields, more than %d", fset.Position(spec.Pos()), spec.Name.Name, count, maxFields)
				}
				return true
			})
		}
	}
}

// maxPackageLines is the most lines of non-test Go a package the plugin
// is built from may have (issue 42: each can be read in one sitting).
const maxPackageLines = 2500

// TestPackageSize fails when a package of the plugin's binary
// (`go list -deps ./cmd/nri-cpualign`, the module's own) has more than
// maxPackageLines lines in its non-test Go files.
func TestPackageSize(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the binary's packages")
	}
	pkgs := modulePackages(t, repoRoot(t), "./cmd/nri-cpualign")
	for _, p := range pkgs {
		lines := 0
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
		if lines > maxPackageLines {
			t.Errorf("%s: %d lines of non-test Go, more than %d: split it along a seam docs/architecture.md can name", p.ImportPath, lines, maxPackageLines)
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list printed %d of the module's packages, want the binary's", len(pkgs))
	}
}
