package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/state"
)

// podNetHost is a host's owned routes and nft as ip and nft change them,
// on one subnet, 192.168.50.0/24.
type podNetHost struct {
	mu     sync.Mutex
	routes map[string]bool // "DST via GW metric M"
	rules  string
}

func (h *podNetHost) run(_ context.Context, name string, args ...string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := strings.Join(args, " ")
	switch {
	case name == "nft":
		h.rules = a
		return nil, nil
	case a == "-4 -j addr show":
		return []byte(`[{"ifname":"eth0","addr_info":[{"family":"inet","local":"192.168.50.10","prefixlen":24}]}]`), nil
	case a == "-4 -j route show table main":
		return []byte(`[]`), nil
	case a == "-4 -j route show table main proto 217":
		var rs []string
		for r := range h.routes {
			f := strings.Fields(r)
			rs = append(rs, `{"dst":"`+f[0]+`","gateway":"`+f[2]+`","dev":"eth0","metric":`+f[4]+`}`)
		}
		return []byte("[" + strings.Join(rs, ",") + "]"), nil
	case strings.HasPrefix(a, "-4 route add "), strings.HasPrefix(a, "-4 route del "):
		f := args[3:]
		key := f[0] + " via " + f[2] + " metric " + f[len(f)-3]
		h.routes[key] = strings.HasPrefix(a, "-4 route add ")
		if !h.routes[key] {
			delete(h.routes, key)
		}
		return nil, nil
	}
	return nil, &unexpected{name + " " + a}
}

type unexpected struct{ cmd string }

func (u *unexpected) Error() string { return "unexpected: " + u.cmd }

func (h *podNetHost) snapshot() ([]string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rs []string
	for r := range h.routes {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs, h.rules
}

func flexNode(name, ip, cidr string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	return n
}

// The keeper routes to every other Node's pod CIDR on the host's subnet
// and follows the Nodes: a pod CIDR allocated later gets its route, a
// deleted Node loses its own, a Node elsewhere gets none; the masquerade
// spares the pod CIDRs routed to.
func TestPodRouteKeeperFollowsNodes(t *testing.T) {
	l := joinedLayout(t)
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "self", Machine: layout.MachineBlue}); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(flexNode("self", "192.168.50.10", "10.244.0.0/24"),
		flexNode("a", "192.168.50.11", "10.244.1.0/24"), flexNode("b", "192.168.50.12", ""),
		flexNode("cloud", "10.9.9.9", "10.244.9.0/24"))
	watching := make(chan struct{}, 10)
	cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(corev1.SchemeGroupVersion.WithResource("nodes"), "")
		watching <- struct{}{}
		return true, w, err
	})
	host := &podNetHost{routes: map[string]bool{}}
	k := &PodRouteKeeper{Layout: l, Log: slog.New(slog.DiscardHandler), Window: time.Minute, ClusterPodCIDR: "10.244.0.0/16",
		Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil },
		Net:    network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Keep(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pass: %v", err)
		}
	}()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch on the Nodes")
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	_, rules := host.snapshot()
	if !strings.Contains(rules, "ip saddr 10.244.0.0/24 ip daddr != { 10.244.0.0/24, 10.244.1.0/24, 224.0.0.0/4 } masquerade") {
		t.Fatalf("masquerade:\n%s", rules)
	}
	nodes := cs.CoreV1().Nodes()
	if _, err := nodes.Update(ctx, flexNode("b", "192.168.50.12", "10.244.2.0/24"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217", "10.244.2.0/24 via 192.168.50.12 metric 217")
	if err := nodes.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, host, "10.244.2.0/24 via 192.168.50.12 metric 217")
	if _, rules = host.snapshot(); strings.Contains(rules, "10.244.1.0/24") {
		t.Fatalf("the deleted Node's pod CIDR is still spared:\n%s", rules)
	}
}

func waitRoutes(t *testing.T, h *podNetHost, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := h.snapshot()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("routes %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A host that has not joined is left alone; a node whose own pod CIDR is
// not known yet routes nothing.
func TestPodRouteKeeperWaits(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	k := &PodRouteKeeper{Layout: l, Log: slog.New(slog.DiscardHandler), Window: time.Millisecond,
		Client: func() (kubeclient.Interface, error) { t.Fatal("a client before the join"); return nil, nil }}
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	l = joinedLayout(t)
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "self", Machine: layout.MachineBlue}); err != nil {
		t.Fatal(err)
	}
	host := &podNetHost{routes: map[string]bool{}}
	cs := fake.NewClientset([]runtime.Object{flexNode("self", "192.168.50.10", ""), flexNode("a", "192.168.50.11", "10.244.1.0/24")}...)
	k = &PodRouteKeeper{Layout: l, Log: slog.New(slog.DiscardHandler), Window: 50 * time.Millisecond, ClusterPodCIDR: "10.244.0.0/16",
		Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil },
		Net:    network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if routes, rules := host.snapshot(); len(routes) != 0 || rules != "" {
		t.Fatalf("routes %q and rules %q before the node's own pod CIDR", routes, rules)
	}
	k.PodCIDR = "10.244.0.0/24" // networking.podCIDR names it
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if routes, _ := host.snapshot(); len(routes) != 1 {
		t.Fatalf("routes %q with networking.podCIDR", routes)
	}
}

// A pass that begins a moment before start writes the joined marker (the
// agent starts just before it) waits for it and routes in the same pass.
func TestPodRouteKeeperWaitsForTheJoin(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "self", Machine: layout.MachineBlue}); err != nil {
		t.Fatal(err)
	}
	host := &podNetHost{routes: map[string]bool{}}
	cs := fake.NewClientset(flexNode("self", "192.168.50.10", "10.244.0.0/24"), flexNode("a", "192.168.50.11", "10.244.1.0/24"))
	k := &PodRouteKeeper{Layout: l, Log: slog.New(slog.DiscardHandler), Window: 5 * time.Second, ClusterPodCIDR: "10.244.0.0/16",
		Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil },
		Net:    network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Keep(ctx) }()
	time.Sleep(300 * time.Millisecond) // start finishing its last tasks
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestPodRoutesRefuseHostileNodes is issue 26's item 2 at the loop: with
// the cluster's pod range 10.244.0.0/16, Nodes written to route half of
// IPv4 and the metadata endpoint through them, and one with an InternalIP
// off the host's subnets, get no route and no place in the masquerade's
// exemptions; each is named in a log line and a Warning Event on this
// node's Node, once; the good peer is routed as before.
func TestPodRoutesRefuseHostileNodes(t *testing.T) {
	l := joinedLayout(t)
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "self", Machine: layout.MachineBlue}); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(flexNode("self", "192.168.50.10", "10.244.0.0/24"), flexNode("good", "192.168.50.11", "10.244.1.0/24"),
		flexNode("half", "192.168.50.66", "128.0.0.0/1"), flexNode("metadata", "192.168.50.67", "169.254.169.254/32"),
		flexNode("lower", "192.168.50.68", "0.0.0.0/1"), flexNode("off-subnet", "203.0.113.9", "10.244.5.0/24"))
	client := func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	host := &podNetHost{routes: map[string]bool{}}
	k := &PodRouteKeeper{Layout: l, Log: log, Window: 50 * time.Millisecond, ClusterPodCIDR: "10.244.0.0/16",
		Client: client, Events: events.New("self", client, log),
		Net: network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	for range 2 { // the second pass matches again: no second Event
		if err := k.Keep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	routes, rules := host.snapshot()
	if !slices.Equal(routes, []string{"10.244.1.0/24 via 192.168.50.11 metric 217"}) {
		t.Errorf("routes %q", routes)
	}
	if !strings.Contains(rules, "ip saddr 10.244.0.0/24 ip daddr != { 10.244.0.0/24, 10.244.1.0/24, 224.0.0.0/4 } masquerade") {
		t.Errorf("masquerade:\n%s", rules)
	}
	evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	for _, name := range []string{"half", "metadata", "lower", "off-subnet"} {
		n := 0
		for _, e := range evs.Items {
			if e.Reason == events.ReasonPodCIDRRefused && e.InvolvedObject.Name == "self" && strings.Contains(e.Message, "Node "+name+" refused") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d Events name Node %s, want 1", n, name)
		}
		if strings.Count(text, "node="+name+" ") != 1 {
			t.Errorf("log lines naming node=%s, want 1:\n%s", name, text)
		}
	}
	if strings.Contains(text, "node=good ") {
		t.Errorf("the good peer refused:\n%s", text)
	}

	// Without networking.clusterPodCIDR nothing is routed or spared, and
	// one log line says why.
	k = &PodRouteKeeper{Layout: l, Log: log, Window: 50 * time.Millisecond, Client: client,
		Net: network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if routes, rules := host.snapshot(); len(routes) != 0 || !strings.Contains(rules, "ip daddr != { 10.244.0.0/24, 224.0.0.0/4 }") {
		t.Errorf("without networking.clusterPodCIDR: routes %q, rules\n%s", routes, rules)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "networking.clusterPodCIDR is not set") {
		t.Errorf("no line says networking.clusterPodCIDR is not set:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
