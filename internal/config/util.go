package config

import (
	"path"
	"sort"
)

func pathClean(p string) string { return path.Clean(p) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
