package aclhost

import (
	"os"
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
