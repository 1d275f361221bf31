package artifact

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// License and notice files, by name. LICENSE is what every redistribution
// must carry; notices are carried when the project has them.
var (
	licenseRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^LICENSE(\.(txt|md))?$`) })
	noticeRE  = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(NOTICE|THIRD_PARTY_NOTICES|ThirdPartyNotices)[A-Za-z0-9._-]*$`)
	})
)

// collectLegal lists the legal files of dir, sorted: LICENSE is required
// (its absence is an error naming dir); notice files are optional and
// their absence is a note, never an error.
func collectLegal(dir string) (names, notes []string, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("--legal-files-dir %s: %w", dir, err)
	}
	var license, notice bool
	for _, de := range des {
		n := de.Name()
		isLicense, isNotice := licenseRE().MatchString(n), noticeRE().MatchString(n)
		if !isLicense && !isNotice {
			continue
		}
		// Links are followed (a repository may link LICENSE to a shared
		// copy); the content is copied, never linked. Only a LICENSE
		// that cannot be read is an error: a notice file that is not
		// there (a dangling link) or not a file is a note, because a
		// missing notice must never fail a build.
		fi, err := os.Stat(filepath.Join(dir, n))
		switch {
		case err != nil && isLicense:
			return nil, nil, fmt.Errorf("--legal-files-dir %s: %s: %w", dir, n, err)
		case err != nil:
			notes = append(notes, fmt.Sprintf("note: skipping %s in %s: %v", n, dir, oneLineErr(err)))
			continue
		case !fi.Mode().IsRegular() && isNotice:
			notes = append(notes, fmt.Sprintf("note: skipping %s in %s: not a regular file", n, dir))
			continue
		case !fi.Mode().IsRegular():
			continue
		}
		license = license || isLicense
		notice = notice || isNotice
		names = append(names, n)
	}
	if !license {
		return nil, nil, fmt.Errorf("--legal-files-dir %s has no LICENSE file (LICENSE, LICENSE.txt or LICENSE.md); add it, or leave --legal-files-dir unset to ship no legal files", dir)
	}
	if !notice {
		notes = append(notes, fmt.Sprintf("note: no NOTICE or THIRD_PARTY_NOTICES file in %s; the bundle carries the LICENSE only", dir))
	}
	sort.Strings(names)
	return names, notes, nil
}

// oneLineErr keeps an error inside a one-line note.
func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
