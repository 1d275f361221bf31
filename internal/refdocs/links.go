package refdocs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// inlineLink is a Markdown link or image: [text](target) or
// [text](target "title"). Reference-style links are not used here.
var inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// DeadLinks checks every relative link in README.md and docs/**/*.md of
// the repository at root: the file (or directory) it names exists and,
// for a link into a Markdown file with a #fragment, a heading there has
// that anchor. It returns one line per dead link, `file:line: target:
// why`.
func DeadLinks(root string) ([]string, error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{}
	var dead []string
	for _, f := range files {
		links, err := linksIn(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			if why := checkLink(root, f, l.target, anchors); why != "" {
				dead = append(dead, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.target, why))
			}
		}
	}
	return dead, nil
}

// markdownFiles are README.md and every .md under docs/, relative to root
// with forward slashes.
func markdownFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

type link struct {
	line   int
	target string
}

// linksIn lists the links of a Markdown file outside code blocks and
// code spans.
func linksIn(file string) ([]link, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []link
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, link{line: n, target: m[1]})
		}
	}
	return out, sc.Err()
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func stripCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "``") }

// checkLink says why target, linked from file (both relative to root),
// is dead, or "" when it resolves.
func checkLink(root, file, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "" // not a relative link: no network in tests
	}
	p, frag, _ := strings.Cut(target, "#")
	dest := file
	if p != "" {
		if strings.HasPrefix(p, "/") {
			return "absolute path: link relative to the file"
		}
		dest = path.Clean(path.Join(path.Dir(file), p))
		if strings.HasPrefix(dest, "../") {
			return "outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
			return "no such file"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	a, ok := anchors[dest]
	if !ok {
		var err error
		if a, err = headingAnchors(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
			return err.Error()
		}
		anchors[dest] = a
	}
	if !a[frag] {
		return "no heading with anchor #" + frag + " in " + dest
	}
	return ""
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// file; a repeated heading gets -1, -2, ...
func headingAnchors(file string) (map[string]bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		s := slug(headingText(text))
		a := s
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", s, i)
		}
		out[a] = true
	}
	return out, nil
}

// headingText drops the Markdown a heading's anchor does not include:
// link targets keep only their text.
var linkInHeading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func headingText(s string) string { return linkInHeading.ReplaceAllString(s, "$1") }
