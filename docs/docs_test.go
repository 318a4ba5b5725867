// Package docs holds the project's documentation pages; its test keeps the
// README short, its links to them valid, and every configuration key
// documented in exactly one place.
package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// readmeLimit keeps the README to what a newcomer and an operator need
// first; everything else belongs in a page here.
const readmeLimit = 25 * 1024

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pages are the markdown files of the README and of docs/, by path
// relative to the repository root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{"README.md": read(t, "../README.md")}
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		m["docs/"+f] = read(t, f)
	}
	return m
}

func TestReadmeSize(t *testing.T) {
	if n := len(read(t, "../README.md")); n > readmeLimit {
		t.Errorf("README.md is %d bytes, over %d: move detail into a docs/ page", n, readmeLimit)
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile("(?m)^#{1,6} (.+)$")
	fenceRE   = regexp.MustCompile("(?s)```.*?```")
)

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	m := map[string]bool{}
	for _, h := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		m[slug(h[1])] = true
	}
	return m
}

func TestLinksResolve(t *testing.T) {
	all := pages(t)
	linked := map[string]bool{}
	for page, text := range all {
		for _, m := range linkRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
			}
			if page == "README.md" {
				linked[path] = true
			}
			if _, err := os.Stat(filepath.Join("..", path)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
				continue
			}
			if frag != "" {
				text, ok := all[path]
				if !ok {
					t.Errorf("%s links to %s: an anchor in a file that is not a documentation page", page, target)
				} else if !anchors(text)[frag] {
					t.Errorf("%s links to %s: %s has no heading for #%s", page, target, path, frag)
				}
			}
		}
	}
	for page := range all {
		if page != "README.md" && !linked[page] {
			t.Errorf("%s is not linked from the README", page)
		}
	}
}

// tomlKeys are the configuration keys pkg/config reads.
func tomlKeys() []string {
	var keys []string
	ty := reflect.TypeOf(config.Config{})
	for i := range ty.NumField() {
		if k, _, _ := strings.Cut(ty.Field(i).Tag.Get("toml"), ","); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// A key is documented by a table row whose first cell names it.
var rowRE = regexp.MustCompile(`(?m)^\|([^|]*)\|`)

func TestEveryConfigKeyDocumentedOnce(t *testing.T) {
	keys := tomlKeys()
	if len(keys) < 10 {
		t.Fatalf("config.Config has only %d toml keys: the reflection is wrong", len(keys))
	}
	all := pages(t)
	for _, k := range keys {
		var where []string
		for page, text := range all {
			for _, m := range rowRE.FindAllStringSubmatch(text, -1) {
				if strings.Contains(m[1], "`"+k+"`") {
					where = append(where, page)
				}
			}
		}
		switch {
		case len(where) == 0:
			t.Errorf("configuration key %q is documented nowhere (want one row of the README's Configuration table)", k)
		case len(where) > 1:
			t.Errorf("configuration key %q is documented in %d places (%v): keep one", k, len(where), where)
		case where[0] != "README.md":
			t.Errorf("configuration key %q is documented in %s, not in the README's Configuration table", k, where[0])
		}
	}
}
