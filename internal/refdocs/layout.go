package refdocs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// examplePrefix is the prefix the layout page shows, the one the ACL
// examples declare.
const examplePrefix = "/opt/aks-flex-node"

// Layout renders the layout reference: every key `layout --get` knows, in
// `layout`'s order, for the classic layout and for a prefix, from
// layout.New; then the prefix rule with an error the rule itself wrote.
func Layout() (string, error) {
	classic, err := layout.New("/", "", "")
	if err != nil {
		return "", err
	}
	prefixed, err := layout.New("/", examplePrefix, "")
	if err != nil {
		return "", err
	}
	ck, pk := classic.Keys(), prefixed.Keys()
	var b strings.Builder
	b.WriteString("# The layout\n\n")
	b.WriteString("Every path the agent owns, for the classic layout and for a declared prefix\n" +
		"(`agent.hostPrefix`, [decision 1](../design.md#decisions)). `aks-flex-node layout\n" +
		"[--prefix P]` prints the same for any prefix; `--get KEY` prints one value for\n" +
		"scripts. `logDir` is `agent.logDir`, shown at its default.\n\n")
	fmt.Fprintf(&b, "| key | empty prefix | prefix `%s` |\n|---|---|---|\n", examplePrefix)
	for _, k := range layout.KeyOrder {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k, orEmpty(ck[k]), orEmpty(pk[k]))
	}
	b.WriteString("\n")
	_, perr := layout.New("/", "/opt/aks flex", "")
	if perr == nil {
		return "", fmt.Errorf("the prefix rule accepted %q", "/opt/aks flex")
	}
	r := strings.NewReplacer(
		"{{MaxPrefixLen}}", strconv.Itoa(layout.MaxPrefixLen),
		"{{PrefixError}}", "```text\nagent.hostPrefix: "+perr.Error()+"\n```")
	b.WriteString(r.Replace(layoutNotes))
	return b.String(), nil
}

func orEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return "`" + s + "`"
}
