package preflight

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"strings"
)

// StateFileName is the agent's state file in the state dir. It moves to
// the package that writes it when that lands; preflight only reads it.
const StateFileName = "state.json"

// stateFile is the part of the state file preflight reads. Unknown fields
// are ignored and a missing field is empty: the file belongs to another
// package and its version, not to preflight.
type stateFile struct {
	ConfigSHA256 string `json:"configSHA256"`
}

// ConfigSHA256 is how the state file records which config an install was
// made from: hex sha256 of the config file's bytes.
func ConfigSHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func existingDeploymentCheck(e *Env) Check {
	state := path.Join(e.Layout.StateDir(), StateFileName)
	var leftovers []string
	for _, m := range e.Layout.Machines() {
		leftovers = append(leftovers, e.Layout.MachineDir(m))
	}
	leftovers = append(leftovers, e.Layout.Units().Agent, e.Layout.Units().Recovery)
	target := strings.Join(append([]string{state}, leftovers...), ", ")

	return NewCheck(NameExistingDeployment, target, func(context.Context) Result {
		var found []string
		for _, p := range leftovers {
			if _, err := e.lstat(p); err == nil {
				found = append(found, p)
			}
		}
		const remedy = "run `aks-flex-node reset` to remove the earlier install, then run start again"

		// How a converged re-run is told apart from a foreign or stale
		// install: start records the sha256 of the config file it ran with
		// in the state file. If that matches the config we were given, the
		// machines and units on disk are the ones this config produced, and
		// start will find them converged and change nothing. Anything else
		// (no state file next to machines or units, an unreadable state
		// file, or a different hash) is an install this config did not
		// make, and start would trample it.
		data, err := e.readFile(state)
		switch {
		case err == nil:
			var st stateFile
			if jerr := json.Unmarshal(data, &st); jerr != nil {
				return Warning(remedy, "an earlier install left %s, which cannot be read (%v); also found: %s", state, jerr, orNone(strings.Join(found, ", ")))
			}
			cfgData, cerr := os.ReadFile(e.ConfigFile)
			if cerr != nil {
				return Warning(remedy, "an earlier install left %s; cannot tell whether it is from this config: %v", state, cerr)
			}
			want := ConfigSHA256(cfgData)
			if strings.EqualFold(strings.TrimSpace(st.ConfigSHA256), want) {
				return OK("converged: a re-run of start changes nothing (%s records the sha256 of %s)", state, e.configFile())
			}
			recorded := "configSHA256 " + short(st.ConfigSHA256)
			if st.ConfigSHA256 == "" {
				recorded = "no configSHA256"
			}
			return Warning(remedy, "an earlier install from a different config is on this host: %s records %s, %s has sha256 %s; also found: %s",
				state, recorded, e.configFile(), short(want), orNone(strings.Join(found, ", ")))
		case !os.IsNotExist(err):
			return Warning(remedy, "cannot read %s: %v", state, err)
		case len(found) > 0:
			return Warning(remedy, "an earlier install left %s but no %s, so it is not known which config made it", strings.Join(found, ", "), state)
		}
		return OK("no earlier install (none of %s)", target)
	})
}

// short keeps hashes readable in one-line messages.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
