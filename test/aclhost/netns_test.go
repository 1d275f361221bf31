package aclhost

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestListenInNetNSKeepsThreads: a listener made in another namespace must
// not cost the process a thread. A thread that exits SIGKILLs every child
// it forked with Pdeathsig (the control plane's components), so under the
// old code (lock, setns, never unlock) each call destroyed one thread, most
// often one of the process's existing ones.
func TestListenInNetNSKeepsThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setns needs root")
	}
	before := threads(t)
	for i := 0; i < 50; i++ {
		l, err := ListenInNetNS("/proc/self/ns/net", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
	}
	after := threads(t)
	for tid := range before {
		if !after[tid] {
			t.Errorf("thread %s exited during ListenInNetNS calls", tid)
		}
	}
}

func threads(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// TestHostInNetNS boots a host in a network namespace wired by a veth pair
// to a second namespace standing in for a control plane, and reaches a
// server listening there: the shape cluster tests use. Nothing touches the
// build machine's own network.
func TestHostInNetNS(t *testing.T) {
	RequireE2E(t)
	var suffix [3]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(suffix[:])
	cp, node := "aclcp-"+id, "aclnode-"+id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{cp, node} {
		ip("netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip("-n", cp, "link", "add", "veth-cp", "type", "veth", "peer", "name", "veth-node", "netns", node)
	ip("-n", cp, "addr", "add", "10.251.0.1/30", "dev", "veth-cp")
	ip("-n", cp, "link", "set", "veth-cp", "up")
	ip("-n", node, "addr", "add", "10.251.0.2/30", "dev", "veth-node")
	ip("-n", node, "link", "set", "veth-node", "up")

	addr := serveInNetNS(t, "/run/netns/"+cp, "10.251.0.1:0")

	h := MustStart(t, Options{NetNS: "/run/netns/" + node})
	out := h.RunOK(t, "curl", "-sS", "--max-time", "5", "http://"+addr+"/")
	if out != "control plane here" {
		t.Errorf("curl from the host: %q", out)
	}
	if links := h.RunOK(t, "ip", "-br", "link"); !strings.Contains(links, "veth-node") {
		t.Errorf("host does not see its namespace's veth:\n%s", links)
	}
}

// serveInNetNS runs an HTTP server answering "control plane here" inside
// the network namespace at nsPath and returns its address. It re-executes
// the test binary under nsenter (TestHelperServer), which keeps the
// namespace switch out of this process.
func serveInNetNS(t *testing.T, nsPath, addr string) string {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+nsPath, os.Args[0], "-test.run=^TestHelperServer$")
	cmd.Env = append(os.Environ(), "ACLHOST_HELPER_ADDR="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper server: %v", err)
	}
	return strings.TrimPrefix(strings.TrimSpace(line), "listening ")
}

// TestHelperServer is not a test: serveInNetNS runs it in a child process.
func TestHelperServer(t *testing.T) {
	addr := os.Getenv("ACLHOST_HELPER_ADDR")
	if addr == "" {
		t.Skip("helper process for TestHostInNetNS")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { //nolint:errcheck // dies with the process
		fmt.Fprint(w, "control plane here")
	}))
	_, _ = io.Copy(io.Discard, os.Stdin) // serve until the parent closes stdin
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		p, dir string
		want   bool
	}{
		{"/usr", "/usr", true},
		{"/usr/local/bin/x", "/usr", true},
		{"/usr/local/bin/x", "/usr/", true},
		{"/usrx/y", "/usr", false},
		{"/opt/aks-flex-node/bin/x", "/usr", false},
		{"/var/usr/x", "/usr", false},
	} {
		if got := under(tc.p, tc.dir); got != tc.want {
			t.Errorf("under(%q, %q) = %v, want %v", tc.p, tc.dir, got, tc.want)
		}
	}
}
