package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/metrics"
)

func joinedLayout(t *testing.T) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

func eventReasons(t *testing.T, cs *fake.Clientset) map[string]string {
	t.Helper()
	evs, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range evs.Items {
		out[e.Reason] = e.Type + ": " + e.Message
	}
	return out
}

// A machine the keeper starts is a repair: counted by kind and recorded
// on the Node; one it cannot start is a RepairFailed warning.
func TestKeeperRecordsRepairs(t *testing.T) {
	l := joinedLayout(t)
	cs := fake.NewClientset()
	rec := events.New("node-1", func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }, nil)
	reg := metrics.NewRegistry(l)
	startErr := errors.New("Unit systemd-nspawn@kube1.service is masked")
	var failStart bool
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name == "systemctl" {
			return []byte("ActiveState=failed\n"), nil
		}
		if name == "machinectl" && args[0] == "start" && failStart {
			return nil, startErr
		}
		return nil, nil
	}
	var log bytes.Buffer
	k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run}, Log: slog.New(slog.NewTextHandler(&log, nil)), Metrics: reg, Events: rec}
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	failStart = true
	if err := k.Keep(context.Background()); !errors.Is(err, startErr) {
		t.Fatalf("failed start: %v", err)
	}
	got := eventReasons(t, cs)
	if got[events.ReasonRepaired] != "Normal: machine kube1 was failed on a joined host; aks-flex-node started it" {
		t.Errorf("Repaired: %q", got[events.ReasonRepaired])
	}
	if !strings.HasPrefix(got[events.ReasonRepairFailed], "Warning: machine kube1 was failed on a joined host and could not be started: ") {
		t.Errorf("RepairFailed: %q", got[events.ReasonRepairFailed])
	}
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var repairs *dto.MetricFamily
	for _, f := range fams {
		if f.GetName() == "aks_flex_node_repairs_total" {
			repairs = f
		}
	}
	if repairs == nil || repairs.GetMetric()[0].GetCounter().GetValue() != 1 || repairs.GetMetric()[0].GetLabel()[0].GetValue() != RepairMachineStarted {
		t.Errorf("repairs: %v", repairs)
	}
}

// A rollback is told once as a RolledBack Event, by whichever agent reads
// the record first; a later rollback is told again.
func TestRollbackToldOnce(t *testing.T) {
	l := joinedLayout(t)
	cs := fake.NewClientset()
	rec := events.New("node-1", func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }, nil)
	write := func(at string) {
		rec := "result=rolled-back\nreason=the new agent exited 1\nfrom_slot=agent-blue\nfrom_version=v1.0.0\nto_slot=agent-green\nto_version=v1.1.0\ntime=" + at + "\nby=recovery\n"
		if err := os.WriteFile(l.OnRoot(l.StateDir()+"/upgrade-result"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int32 {
		evs, _ := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		var n int32
		for _, e := range evs.Items {
			n += e.Count
		}
		return n
	}
	loop := ReportUpgradeOutcome(l, rec)
	write("2025-01-02T03:04:05Z")
	for i := 0; i < 3; i++ {
		if err := loop.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("%d RolledBack Events after three passes, want 1", n)
	}
	write("2025-01-03T03:04:05Z")
	if err := loop.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("a second rollback: %d Events, want 2", n)
	}
	if got := eventReasons(t, cs)[events.ReasonRolledBack]; !strings.Contains(got, "v1.0.0 (agent-blue) -> v1.1.0 (agent-green) rolled back by recovery") {
		t.Errorf("RolledBack: %q", got)
	}
}
