package upgrade

import (
	"bytes"
	_ "embed"
	"fmt"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/Azure/aks-flex-node/internal/layout"
)

var (
	//go:embed recovery.sh.tmpl
	recoveryScriptTemplate string
	//go:embed recovery.service
	recoveryUnitTemplate string
	//go:embed recovery.timer
	recoveryTimerText string
)

// ScriptPlaceholder is the literal the recovery unit template carries for
// the script's path; RenderRecoveryUnit replaces it with the layout's
// recoveryScript, the path InstallService writes the script to.
const ScriptPlaceholder = "@RECOVERY_SCRIPT@"

var scriptTmpl = template.Must(template.New("recovery.sh").Option("missingkey=error").Parse(recoveryScriptTemplate))

type scriptVars struct {
	LibDir, StateDir, Current, LastGood, Blue, Green string
	AgentUnit, RecoveryUnit, TimerUnit               string
	InFlightFile, ResultFile, FailedFile             string
	LinksLockFile, BootIDFile                        string
}

// checkLayout: every path here is interpolated unquoted into a shell script
// and unit files, which is safe because layout.New admitted only paths with
// no byte a shell or systemd treats specially; a Layout it did not make is
// refused.
func checkLayout(l layout.Layout, what string) error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("render %s: %w", what, err)
	}
	return nil
}

// RenderRecoveryScript renders the recovery script for a layout.
func RenderRecoveryScript(l layout.Layout) (string, error) {
	if err := checkLayout(l, layout.RecoveryScript); err != nil {
		return "", err
	}
	var b bytes.Buffer
	err := scriptTmpl.Execute(&b, scriptVars{
		LibDir: l.LibDir(), StateDir: l.StateDir(),
		Current: l.UpgradeSlots().Current, LastGood: l.UpgradeSlots().LastGood,
		Blue: filepath.Base(l.UpgradeSlots().Blue), Green: filepath.Base(l.UpgradeSlots().Green),
		AgentUnit: layout.AgentUnitName, RecoveryUnit: layout.RecoveryUnit, TimerUnit: layout.RecoveryTimer,
		InFlightFile: InFlightFile, ResultFile: ResultFile, FailedFile: FailedFile,
		LinksLockFile: LinksLockFile, BootIDFile: bootIDFile,
	})
	if err != nil {
		return "", fmt.Errorf("render %s: %w", layout.RecoveryScript, err)
	}
	return b.String(), nil
}

// RenderRecoveryUnit renders aks-flex-node-recovery.service.
func RenderRecoveryUnit(l layout.Layout) (string, error) {
	if err := checkLayout(l, layout.RecoveryUnit); err != nil {
		return "", err
	}
	if strings.Count(recoveryUnitTemplate, ScriptPlaceholder) != 1 {
		return "", fmt.Errorf("render %s: template must hold %s exactly once", layout.RecoveryUnit, ScriptPlaceholder)
	}
	return strings.Replace(recoveryUnitTemplate, ScriptPlaceholder, l.RecoveryScript(), 1), nil
}

// RecoveryTimer returns aks-flex-node-recovery.timer; it names no path.
func RecoveryTimer() string { return recoveryTimerText }
