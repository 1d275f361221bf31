package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// write-pod-network on a re-join restarts the kubelet only when it does
// not report Ready on its own (it found a Ready from before it): after a
// reset that marked the Node, it does.
func TestWritePodNetworkRestartsOnlyAStuckKubelet(t *testing.T) {
	started := time.Now().Add(-2 * time.Second)
	for _, tc := range []struct {
		name        string
		hb          time.Time
		wantRestart bool
	}{
		{"reported", started, false},
		{"stuck", started.Add(-time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := layout.New(t.TempDir(), "", "")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var restarts int
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				cmd := name + " " + strings.Join(args, " ")
				switch {
				case name == "systemctl" && args[0] == "show":
					return []byte("ActiveState=active\n"), nil
				case name == "machinectl":
					return []byte("1234\n"), nil
				case strings.Contains(cmd, "ExecMainStartTimestamp"):
					return fmt.Appendf(nil, "ExecMainStartTimestampMonotonic=%d\n", monotonicAt(t, started)), nil
				case strings.HasSuffix(cmd, "systemctl restart kubelet.service"):
					mu.Lock()
					restarts++
					mu.Unlock()
					return nil, nil
				}
				return nil, errors.New("unexpected " + cmd)
			}
			cs := fake.NewClientset(readyNode(corev1.ConditionTrue, tc.hb))
			w := WritePodNetwork(testMachine(l, run), &config.Config{}, time.Second, nil).(*writePodNetwork)
			res, err := w.reportNow(t.Context(), kubeclienttest.Wrap(cs), "n1")
			if err != nil || !res.Changed {
				t.Fatalf("reportNow: %+v %v", res, err)
			}
			if got := restarts == 1; got != tc.wantRestart {
				t.Errorf("restarted %d times (%s), want restart=%t", restarts, res.Detail, tc.wantRestart)
			}
		})
	}
}
