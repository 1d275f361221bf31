package refdocs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var (
	makeRule  = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	makePhony = regexp.MustCompile(`(?m)^\.PHONY:(.*)$`)
	// makeUse is a make command in a code span: `make demo`,
	// `KEEP=1 make demo`, `make e2e PKG=join`.
	makeUse = regexp.MustCompile("`(?:[A-Z_]+=\\S* )*make ([a-z][a-z0-9-]*)")
)

// MakeProblems says what is wrong between the Makefile and the docs: a
// target declared .PHONY with no rule (it would do nothing and exit 0),
// and a `make X` in README.md or docs/ with no rule X.
func MakeProblems(root string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	rules := map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(string(data), -1) {
		rules[m[1]] = true
	}
	var out []string
	for _, m := range makePhony.FindAllStringSubmatch(string(data), -1) {
		for _, t := range strings.Fields(m[1]) {
			if !rules[t] {
				out = append(out, "Makefile: .PHONY declares "+t+", which has no rule")
			}
		}
	}
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, m := range makeUse.FindAllStringSubmatch(string(data), -1) {
			if !rules[m[1]] && !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, f+": `make "+m[1]+"`: the Makefile has no rule "+m[1])
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
