package agentupgrade

import (
	"fmt"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// scriptVars are the recovery script's constants: the layout's paths and
// names, and the record files it shares with this package.
type scriptVars struct {
	LibDir, StateDir, Current, LastGood, Blue, Green string
	AgentUnit, RecoveryUnit, TimerUnit               string
	InFlightFile, ResultFile, FailedFile             string
	LinksLockFile, BootIDFile                        string
}

// RenderRecoveryScript renders the recovery script for a layout. Every path
// in it is interpolated unquoted into shell, which is safe because
// layout.New admitted only paths with no byte a shell treats specially; a
// Layout it did not make is refused.
func RenderRecoveryScript(l layout.Layout) (string, error) {
	if err := l.Check(); err != nil {
		return "", fmt.Errorf("render %s: %w", layout.RecoveryScript, err)
	}
	return render(layout.RecoveryScript, genfile.RecoveryScript, scriptVars{
		LibDir: l.LibDir(), StateDir: l.StateDir(),
		Current: l.UpgradeSlots().Current, LastGood: l.UpgradeSlots().LastGood,
		Blue: filepath.Base(l.UpgradeSlots().Blue), Green: filepath.Base(l.UpgradeSlots().Green),
		AgentUnit: layout.AgentUnitName, RecoveryUnit: layout.RecoveryUnit, TimerUnit: layout.RecoveryTimer,
		InFlightFile: InFlightFile, ResultFile: ResultFile, FailedFile: FailedFile,
		LinksLockFile: LinksLockFile, BootIDFile: bootIDFile,
	})
}

// RenderRecoveryUnit renders aks-flex-node-recovery.service, which runs the
// script at the path InstallService writes it to.
func RenderRecoveryUnit(l layout.Layout) (string, error) {
	if err := l.Check(); err != nil {
		return "", fmt.Errorf("render %s: %w", layout.RecoveryUnit, err)
	}
	return render(layout.RecoveryUnit, genfile.RecoveryUnit, struct{ RecoveryScript, RecoveryTimer string }{
		l.RecoveryScript(), layout.RecoveryTimer,
	})
}

// RenderRecoveryTimer renders aks-flex-node-recovery.timer; it names no
// path, only the unit it starts.
func RenderRecoveryTimer() (string, error) {
	return render(layout.RecoveryTimer, genfile.RecoveryTimer, struct{ RecoveryUnit string }{layout.RecoveryUnit})
}

func render(file string, n genfile.Name, data any) (string, error) {
	b, err := genfile.Render(n, data)
	if err != nil {
		return "", fmt.Errorf("render %s: %w", file, err)
	}
	return string(b), nil
}
