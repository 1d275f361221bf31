package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

// The simulator runs its nodes in worker processes: the test binary run
// again with workerEnv set (TestMain), each worker holding a share of
// the nodes, every node with its own identity. One process of 1,000
// agents ran out on this machine (12 GB, then TLS handshakes timing out
// while its garbage collector held the cores); workers keep each heap a
// quarter of that, let the kernel schedule them apart, and say what one
// simulated node costs (their RSS over their nodes). The parent speaks
// to each over net/rpc on two pipes (fd 3 in, fd 4 out); the worker's
// stderr is its log; a worker ends when its pipe closes (the parent
// done or gone) or, should the parent die first, by its death signal.

const workerEnv = "AKS_FLEX_NODE_FLEETSIM_WORKER"

// logf is the worker's log (stderr, which the parent reads).
var logf = log.Printf

// workerMain serves the parent's calls on fd 3 and 4 until the pipe
// closes; then every node's goroutines end with the worker's context.
func workerMain() int {
	in, out := os.NewFile(3, "from-parent"), os.NewFile(4, "to-parent")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "fleetsim worker: fd 3 and 4 must be the parent's pipes")
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Worker{s: &shard{ctx: ctx, meter: newMeter()}}
	serve(w, pipeConn{in, out})
	return 0
}

// pipeConn is two pipes as one connection.
type pipeConn struct {
	io.ReadCloser
	w io.WriteCloser
}

func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }

func (p pipeConn) Close() error { return errors.Join(p.ReadCloser.Close(), p.w.Close()) }

// Worker is the RPC service a worker process offers its parent.
type Worker struct{ s *shard }

// Register creates the shard's nodes and starts their heartbeats.
func (w *Worker) Register(spec ShardSpec, reply *int) error {
	w.s.spec = spec
	if err := w.s.register(); err != nil {
		return fmt.Errorf("worker %d-%d: %w", spec.Lo, spec.Hi-1, err)
	}
	*reply = len(w.s.nodes)
	return nil
}

// StartAgents starts the agents and returns once each has synced.
func (w *Worker) StartAgents(_ int, reply *int) error {
	*reply = len(w.s.nodes)
	return w.s.startAgents()
}

// AwaitArgs name a Node and the InternalIP to wait for.
type AwaitArgs struct {
	Target string
	IP     string
}

// Await makes every agent wait for the change (Arrivals collects).
func (w *Worker) Await(a AwaitArgs, reply *int) error {
	w.s.await(a.Target, a.IP)
	*reply = len(w.s.agents)
	return nil
}

// Arrivals is when each agent saw a change, Unix ns, and who did not.
type Arrivals struct {
	At     []int64
	Missed int
}

// Arrivals waits up to timeout for the change awaited.
func (w *Worker) Arrivals(timeout time.Duration, reply *Arrivals) error {
	*reply = w.s.arrivals(timeout)
	return nil
}

// PostArgs are a node's index and its new InternalIP.
type PostArgs struct {
	I  int
	IP string
}

// PostStatus posts node I's status at IP as its kubelet would.
func (w *Worker) PostStatus(a PostArgs, reply *int) error { return w.s.postStatus(a.I, a.IP) }

// Routes is the routes each agent's host has.
func (w *Worker) Routes(_ int, reply *[]int) error {
	*reply = w.s.routes()
	return nil
}

// Reset starts a new window of the meter.
func (w *Worker) Reset(_ int, reply *int) error {
	w.s.meter.reset()
	return nil
}

// Window is a meter's window on the wire.
type Window struct {
	Seconds   float64
	Counts    map[string]int64
	Latencies []time.Duration
}

// Snapshot is the meter's counts since its reset.
func (w *Worker) Snapshot(_ int, reply *Window) error {
	s := w.s.meter.snapshot()
	*reply = Window{Seconds: s.seconds, Counts: s.counts, Latencies: s.latencies}
	return nil
}

// Lists are the Node lists since start: by node without a
// resourceVersion (etcd), and by "node loop".
type Lists struct {
	Etcd map[string]int
	All  map[string]int
}

// Lists is the meter's Node lists since the worker started.
func (w *Worker) Lists(_ int, reply *Lists) error {
	*reply = Lists{Etcd: w.s.meter.etcdNodeLists(), All: w.s.meter.nodeListsBy()}
	return nil
}

// BeginRollout sets the stub hosts' switch time and forgets past switches.
func (w *Worker) BeginRollout(switchFor time.Duration, reply *int) error {
	w.s.hosts.begin(switchFor)
	return nil
}

// Updated is how many of the shard's hosts run version.
func (w *Worker) Updated(version string, reply *int) error {
	*reply = w.s.hosts.updated(version)
	return nil
}

// Switches are the stub hosts' switches since BeginRollout.
func (w *Worker) Switches(_ int, reply *[]Interval) error {
	*reply = w.s.hosts.switches()
	return nil
}

// Mem is what the worker process holds.
type Mem struct {
	Nodes      int
	HeapInuse  uint64
	Sys        uint64
	Goroutines int
}

// Mem reads the worker's runtime (its RSS the parent reads in /proc).
func (w *Worker) Mem(_ int, reply *Mem) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	*reply = Mem{Nodes: len(w.s.nodes), HeapInuse: ms.HeapInuse, Sys: ms.Sys, Goroutines: runtime.NumGoroutine()}
	return nil
}

// HeapProfile writes the worker's heap profile to path (go tool pprof).
func (w *Worker) HeapProfile(path string, reply *int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ProfileArgs name a file and how long to profile.
type ProfileArgs struct {
	Path string
	For  time.Duration
}

// CPUProfile profiles the worker's CPU for a while into a file.
func (w *Worker) CPUProfile(a ProfileArgs, reply *int) error {
	f, err := os.Create(a.Path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	sleep(w.s.ctx, a.For)
	pprof.StopCPUProfile()
	return f.Close()
}
