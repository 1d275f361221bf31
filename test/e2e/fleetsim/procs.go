package fleetsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// serve answers the parent's calls on conn until it closes.
func serve(w *Worker, conn io.ReadWriteCloser) {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Worker", w); err != nil {
		logf("fleetsim worker: %v", err)
		return
	}
	srv.ServeConn(conn)
}

// worker is the parent's handle on one worker process.
type worker struct {
	lo, hi int
	cmd    *exec.Cmd
	rpc    *rpc.Client
	logs   sync.WaitGroup // its stderr, copied to the log
}

// call is the worker's method with a deadline of ctx's.
func (w *worker) call(ctx context.Context, method string, args, reply any) error {
	c := w.rpc.Go("Worker."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-c.Done:
		if c.Error != nil {
			return fmt.Errorf("worker %d-%d: %s: %w", w.lo, w.hi-1, method, c.Error)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker %d-%d: %s: %w", w.lo, w.hi-1, method, ctx.Err())
	}
}

// startWorker runs the test binary again as the worker of nodes [lo, hi);
// its log lines go to logf with its range before them.
func startWorker(lo, hi int, logf func(string, ...any)) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the test binary to run as a worker: %w", err)
	}
	toChild, fromParent, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromChild, toParent, err := os.Pipe()
	if err != nil {
		return nil, errors.Join(err, toChild.Close(), fromParent.Close())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, errors.Join(err, toChild.Close(), fromParent.Close(), fromChild.Close(), toParent.Close())
	}
	w := &worker{lo: lo, hi: hi}
	w.cmd = exec.Command(self)
	w.cmd.Env = append(os.Environ(), workerEnv+"=1")
	// A worker's heap is its agents' caches of every Node (two copies of
	// ~880 B per Node an agent, N² in all): at 1,000 nodes and GOGC=100
	// the workers spent 0.2 of a core each (0.8 of the machine's 2, beside
	// the API server they measure), 38 % of it marking that heap again;
	// at 400, 15 % of 0.16. A larger GOGC marks it less often; the memory
	// limit keeps the heap bounded all the same, and must stay above
	// what the heap needs: at 1,000 nodes with pod CIDRs the workers grew
	// to 1.98 GB each, at a 2 GiB limit, and the collector ran without
	// pause (Node watchers cut for falling behind, 39 a second). Either
	// set in the environment wins.
	if os.Getenv("GOGC") == "" {
		w.cmd.Env = append(w.cmd.Env, "GOGC=400")
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		w.cmd.Env = append(w.cmd.Env, "GOMEMLIMIT=3GiB")
	}
	w.cmd.ExtraFiles = []*os.File{toChild, toParent} // fd 3, fd 4
	w.cmd.Stderr = errW
	// Should the parent die without closing the pipes, the kernel ends
	// the worker too.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = w.cmd.Start()
	_ = toChild.Close()
	_ = toParent.Close()
	_ = errW.Close()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start worker %d-%d: %w", lo, hi-1, err), fromParent.Close(), fromChild.Close(), errR.Close())
	}
	w.logs.Go(func() {
		s := bufio.NewScanner(errR)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			logf("[%d-%d] %s", lo, hi-1, s.Text())
		}
		_ = errR.Close()
	})
	w.rpc = rpc.NewClient(pipeConn{fromChild, fromParent})
	return w, nil
}

// stop closes the worker's pipe (it ends its nodes and exits), and kills
// it when it has not exited within grace.
func (w *worker) stop(grace time.Duration) error {
	_ = w.rpc.Close()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace):
		_ = w.cmd.Process.Kill()
		err = fmt.Errorf("worker %d-%d did not exit within %s of its pipe closing: killed (%v)", w.lo, w.hi-1, grace, <-done)
	}
	w.logs.Wait()
	return err
}

// each runs every worker's method at once (each with its own
// arguments and reply from mk) and returns the first error.
func (f *Fleet) each(ctx context.Context, method string, mk func(w *worker) (args, reply any), done func(w *worker, reply any)) error {
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	for _, w := range f.workers {
		g.Go(func() error {
			args, reply := mk(w)
			if err := w.call(gctx, method, args, reply); err != nil {
				return err
			}
			if done != nil {
				mu.Lock()
				defer mu.Unlock()
				done(w, reply)
			}
			return nil
		})
	}
	return g.Wait()
}
