package config

import (
	"errors"
	"strings"
	"testing"
)

// networking.kubeProxy defaults to daemonset; each invalid form of it and
// of networking.kubeProxyMode is refused with its JSON path.
func TestKubeProxyValidation(t *testing.T) {
	c, err := parse(t, base(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Networking.KubeProxy != KubeProxyDaemonSet || c.Networking.AgentKubeProxy() {
		t.Fatalf("default networking.kubeProxy %q", c.Networking.KubeProxy)
	}
	cases := []struct {
		name    string
		edits   map[string]any
		path    string // "" = valid
		contain string
	}{
		{"agent ok", map[string]any{"networking.kubeProxy": "agent"}, "", ""},
		{"agent nftables ok", map[string]any{"networking.kubeProxy": "agent", "networking.kubeProxyMode": "nftables"}, "", ""},
		{"agent iptables ok", map[string]any{"networking.kubeProxy": "agent", "networking.kubeProxyMode": "iptables"}, "", ""},
		{"daemonset ok", map[string]any{"networking.kubeProxy": "daemonset"}, "", ""},
		{"unknown", map[string]any{"networking.kubeProxy": "Agent"}, "networking.kubeProxy", `must be "daemonset"`},
		{"mode unknown", map[string]any{"networking.kubeProxy": "agent", "networking.kubeProxyMode": "ipvs"}, "networking.kubeProxyMode", `must be "iptables" or "nftables"`},
		{"agent in cluster mode", map[string]any{"networking.kubeProxy": "agent", "networking.mode": "cluster"}, "networking.kubeProxy", `needs networking.mode "bridge"`},
		{"daemonset in cluster mode ok", map[string]any{"networking.kubeProxy": "daemonset", "networking.mode": "cluster"}, "", ""},
		{"mode without agent", map[string]any{"networking.kubeProxyMode": "nftables"}, "networking.kubeProxyMode", `networking.kubeProxy is "daemonset"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := base(t)
			for p, v := range tc.edits {
				set(m, p, v)
			}
			c, err := parse(t, m)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if want := tc.edits["networking.kubeProxy"]; c.Networking.KubeProxy != want {
					t.Fatalf("networking.kubeProxy %q, want %q", c.Networking.KubeProxy, want)
				}
				return
			}
			var ve ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("want ValidationErrors, got %v", err)
			}
			for _, e := range ve {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.contain) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.contain, ve)
		})
	}
}
