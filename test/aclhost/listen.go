package aclhost

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// ListenTCP opens a TCP listener inside the host's network namespace (addr
// as net.Listen takes it, e.g. "127.0.0.1:0"), served by the test process:
// how a test puts a fake service (IMDS) where only the host can reach it,
// even on a host with a private network.
func (h *Host) ListenTCP(addr string) (net.Listener, error) {
	if h.leader == 0 {
		return nil, errors.New("aclhost: host has no running init")
	}
	l, err := ListenInNetNS(fmt.Sprintf("/proc/%d/ns/net", h.leader), addr)
	if err != nil {
		return nil, fmt.Errorf("aclhost: listen inside %s: %w", h.name, err)
	}
	return l, nil
}

// ListenInNetNS opens a TCP listener inside the network namespace at nsPath
// (/proc/PID/ns/net, /run/netns/NAME). A socket stays in the namespace it
// was created in, so only the creating thread switches, and it switches
// back before it is unlocked.
//
// The thread must never be left to exit (what the runtime does with a
// thread whose goroutine ends while locked): children started with
// Pdeathsig (the control plane's) get SIGKILL when the thread that forked
// them exits, and any thread may have forked one. That is how a listener
// once killed a running kube-controller-manager and kube-scheduler.
func ListenInNetNS(nsPath, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open %s: %w", nsPath, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		l, err := net.Listen("tcp", addr)
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			// Stuck in the wrong namespace: this thread must serve no
			// other goroutine, and must not exit either (see above), so
			// park it for the life of the process.
			ch <- result{l, err}
			select {}
		}
		runtime.UnlockOSThread()
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}
