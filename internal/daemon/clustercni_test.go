package daemon

import (
	"encoding/base64"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// A node in networking.mode cluster runs no keep-pod-routes loop: the
// cluster's CNI routes between the nodes' pods and masquerades what
// leaves them. A bridge-mode node runs it.
func TestAgentLoopsByNetworkMode(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]bool{config.NetworkModeBridge: true, config.NetworkModeCluster: false} {
		c := &config.Config{}
		c.Agent.NodeName = "n1"
		c.Networking.Mode = mode
		c.Node.Kubelet.ClusterFQDN = srv.URL
		c.Node.Kubelet.CACertData = base64.StdEncoding.EncodeToString(ca)
		config.ApplyDefaults(c)
		a, err := New(c, l, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		has := false
		for _, lp := range a.Loops {
			names = append(names, lp.Name)
			has = has || lp.Name == keepPodRoutesLoop
		}
		if has != want {
			t.Errorf("mode %s: loops %q; want %s: %v", mode, names, keepPodRoutesLoop, want)
		}
	}
}
