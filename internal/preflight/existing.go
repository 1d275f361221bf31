package preflight

import (
	"context"
	"os"
	"path"
	"strings"

	"github.com/Azure/aks-flex-node/internal/state"
)

func existingDeploymentCheck(e *Env) Check {
	statePath := path.Join(e.Layout.StateDir(), state.AppliedFile)
	var leftovers []string
	for _, m := range e.Layout.Machines() {
		leftovers = append(leftovers, e.Layout.MachineDir(m))
	}
	leftovers = append(leftovers, e.Layout.Units().Agent, e.Layout.Units().Recovery)
	target := strings.Join(append([]string{statePath}, leftovers...), ", ")

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
		data, err := e.readFile(statePath)
		switch {
		case err == nil:
			recordedSum, jerr := state.RecordedConfigDigest(data)
			if jerr != nil {
				return Warning(remedy, "an earlier install left %s, which cannot be read (%v); also found: %s", statePath, jerr, orNone(strings.Join(found, ", ")))
			}
			cfgData, cerr := os.ReadFile(e.ConfigFile)
			if cerr != nil {
				return Warning(remedy, "an earlier install left %s; cannot tell whether it is from this config: %v", statePath, cerr)
			}
			want := state.ConfigDigest(cfgData)
			if strings.EqualFold(strings.TrimSpace(recordedSum), want) {
				return OK("converged: a re-run of start changes nothing (%s records the sha256 of %s)", statePath, e.configFile())
			}
			if e.Repaving != "" {
				return OK("%s records another config (configSHA256 %s); start repaves the node to this one: %s", statePath, short(recordedSum), e.Repaving)
			}
			recorded := "configSHA256 " + short(recordedSum)
			if recordedSum == "" {
				recorded = "no configSHA256"
			}
			return Warning(remedy, "an earlier install from a different config is on this host: %s records %s, %s has sha256 %s; also found: %s",
				statePath, recorded, e.configFile(), short(want), orNone(strings.Join(found, ", ")))
		case !os.IsNotExist(err):
			return Warning(remedy, "cannot read %s: %v", statePath, err)
		case len(found) > 0:
			return Warning(remedy, "an earlier install left %s but no %s, so it is not known which config made it", strings.Join(found, ", "), statePath)
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
