package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// fakeAPI speaks the API server's wire protocol for what the status
// writer and its lock use: one namespace's FlexNodeSlots (get, create,
// compare-and-swap update), the rollouts (list, watch, get, status
// update with compare-and-swap), the Nodes (list, watch) and Events
// (create). A unit test's stand-in: the e2e runs the real server.
type fakeAPI struct {
	t  *testing.T
	mu sync.Mutex
	rv int

	slots    map[string]*v1alpha1.FlexNodeSlot
	rollouts map[string]*v1alpha1.FlexNodeRollout
	nodes    map[string]*corev1.Node
	events   []corev1.Event
	watchers map[string][]chan []byte // "nodes" or "rollouts"
	requests []string                 // method path, in order
	// slotEvents are the slots' watch events, for a watch from a version.
	slotEvents []slotEvent
	// conflictStatus makes the next n status writes conflict.
	conflictStatus int
	failGets       bool
	// failSlotWatches makes every watch of the slots fail (500).
	failSlotWatches bool
	// eventDelay is how long each Event's create takes to answer.
	eventDelay time.Duration
}

func newFakeAPI(t *testing.T) (*fakeAPI, *rest.Config) {
	f := &fakeAPI{t: t, slots: map[string]*v1alpha1.FlexNodeSlot{}, rollouts: map[string]*v1alpha1.FlexNodeRollout{},
		nodes: map[string]*corev1.Node{}, watchers: map[string][]chan []byte{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	t.Cleanup(f.closeWatches)
	return f, &rest.Config{Host: srv.URL}
}

const (
	slotsPath    = "/apis/flexnode.azure.com/v1alpha1/namespaces/aks-flex-node/flexnodeslots"
	rolloutsPath = "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts"
)

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	p := r.URL.Path
	switch {
	case r.URL.Query().Get("watch") == "true" && strings.HasPrefix(p, slotsPath):
		f.watchSlots(w, r)
	case r.URL.Query().Get("watch") == "true":
		f.watch(w, r, map[bool]string{true: "nodes", false: "rollouts"}[p == "/api/v1/nodes"], nil)
	case strings.HasPrefix(p, slotsPath):
		f.slot(w, r.Method, strings.TrimPrefix(strings.TrimPrefix(p, slotsPath), "/"), body)
	case p == rolloutsPath && r.Method == http.MethodGet:
		f.mu.Lock()
		list := v1alpha1.FlexNodeRolloutList{TypeMeta: metav1.TypeMeta{APIVersion: "flexnode.azure.com/v1alpha1", Kind: "FlexNodeRolloutList"}}
		for _, ro := range f.rollouts {
			list.Items = append(list.Items, *ro)
		}
		list.ResourceVersion = strconv.Itoa(f.rv)
		f.mu.Unlock()
		reply(w, 200, list)
	case strings.HasPrefix(p, rolloutsPath+"/"):
		f.rollout(w, r.Method, strings.TrimPrefix(p, rolloutsPath+"/"), body)
	case p == "/api/v1/nodes":
		f.mu.Lock()
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}}
		for _, n := range f.nodes {
			list.Items = append(list.Items, *n)
		}
		list.ResourceVersion = strconv.Itoa(f.rv)
		f.mu.Unlock()
		reply(w, 200, list)
	case p == "/api/v1/namespaces/default/events" && r.Method == http.MethodPost:
		var ev corev1.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			status(w, 400, "BadRequest", err.Error())
			return
		}
		f.mu.Lock()
		delay := f.eventDelay
		f.mu.Unlock()
		time.Sleep(delay)
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
		reply(w, 201, ev)
	default:
		status(w, 404, "NotFound", p)
	}
}

func (f *fakeAPI) slot(w http.ResponseWriter, method, name string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var in v1alpha1.FlexNodeSlot
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			status(w, 400, "BadRequest", err.Error())
			return
		}
	}
	switch method {
	case http.MethodGet:
		if f.failGets {
			status(w, 500, "InternalError", "down")
			return
		}
		s, ok := f.slots[name]
		if !ok {
			status(w, 404, "NotFound", name)
			return
		}
		reply(w, 200, s)
	case http.MethodPost:
		if _, ok := f.slots[in.Name]; ok {
			status(w, 409, "AlreadyExists", in.Name)
			return
		}
		f.rv++
		in.ResourceVersion = strconv.Itoa(f.rv)
		f.slots[in.Name] = &in
		f.publishSlot("ADDED", &in)
		reply(w, 201, in)
	case http.MethodPut:
		cur, ok := f.slots[name]
		if !ok {
			status(w, 404, "NotFound", name)
			return
		}
		if in.ResourceVersion != cur.ResourceVersion {
			status(w, 409, "Conflict", "the object has been modified")
			return
		}
		f.rv++
		in.ResourceVersion = strconv.Itoa(f.rv)
		f.slots[name] = &in
		f.publishSlot("MODIFIED", &in)
		reply(w, 200, in)
	}
}

func (f *fakeAPI) rollout(w http.ResponseWriter, method, path string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name, sub, _ := strings.Cut(path, "/")
	cur, ok := f.rollouts[name]
	if !ok {
		status(w, 404, "NotFound", name)
		return
	}
	switch {
	case method == http.MethodGet && sub == "":
		reply(w, 200, cur)
	case method == http.MethodPut && sub == "status":
		var in v1alpha1.FlexNodeRollout
		if err := json.Unmarshal(body, &in); err != nil {
			status(w, 400, "BadRequest", err.Error())
			return
		}
		if f.conflictStatus > 0 || in.ResourceVersion != cur.ResourceVersion {
			f.conflictStatus--
			status(w, 409, "Conflict", "the object has been modified")
			return
		}
		next := cur.DeepCopy()
		next.Status = in.Status
		f.rv++
		next.ResourceVersion = strconv.Itoa(f.rv)
		f.rollouts[name] = next
		f.publish("rollouts", "MODIFIED", next)
		reply(w, 200, next)
	default:
		status(w, 405, "MethodNotAllowed", method)
	}
}

// slotEvent is a slot's watch event at its resourceVersion.
type slotEvent struct {
	rv    int
	event []byte
}

// publishSlot records a slot's event and sends it to the slots' watchers;
// f.mu held.
func (f *fakeAPI) publishSlot(typ string, s *v1alpha1.FlexNodeSlot) {
	s.APIVersion, s.Kind = v1alpha1.SchemeGroupVersion.String(), "FlexNodeSlot"
	b, err := json.Marshal(map[string]any{"type": typ, "object": s})
	if err != nil {
		f.t.Error(err)
		return
	}
	rv, _ := strconv.Atoi(s.ResourceVersion)
	f.slotEvents = append(f.slotEvents, slotEvent{rv, b})
	f.publish("slots", typ, s)
}

// watchSlots is a watch of the slots from the request's resourceVersion,
// as the API server's: the events after it first, then the new ones
// (the fake keeps one namespace of few slots: no field selector needed).
func (f *fakeAPI) watchSlots(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.failSlotWatches {
		f.mu.Unlock()
		status(w, 500, "InternalError", "watch down")
		return
	}
	f.mu.Unlock()
	from, _ := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	f.watch(w, r, "slots", func() (replay [][]byte) {
		for _, e := range f.slotEvents {
			if e.rv > from {
				replay = append(replay, e.event)
			}
		}
		return replay
	})
}

// watch streams replay's events (read as the watch is registered, f.mu
// held: none is lost between), then the events published for resource
// until the client or the test goes away.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request, resource string, replayed func() [][]byte) {
	ch := make(chan []byte, 100)
	var replay [][]byte
	f.mu.Lock()
	f.watchers[resource] = append(f.watchers[resource], ch)
	if replayed != nil {
		replay = replayed()
	}
	f.mu.Unlock()
	defer func() { // a watch that ended is sent nothing more
		f.mu.Lock()
		defer f.mu.Unlock()
		f.watchers[resource] = slices.DeleteFunc(f.watchers[resource], func(c chan []byte) bool { return c == ch })
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	// Each event is shared by every watcher: written as it is, then the
	// line's end (an append could write into the shared array).
	for _, b := range replay {
		_, _ = w.Write(b)
		_, _ = w.Write([]byte{'\n'})
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case b, ok := <-ch:
			if !ok {
				return
			}
			_, _ = w.Write(b)
			_, _ = w.Write([]byte{'\n'})
			w.(http.Flusher).Flush()
		}
	}
}

// publish sends a watch event to every watcher of resource; f.mu held.
func (f *fakeAPI) publish(resource, typ string, obj any) {
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj})
	if err != nil {
		f.t.Error(err)
		return
	}
	for _, ch := range f.watchers[resource] {
		select {
		case ch <- b:
		default:
			f.t.Error("a watcher is not reading")
		}
	}
}

func (f *fakeAPI) closeWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, chs := range f.watchers {
		for _, ch := range chs {
			close(ch)
		}
		delete(f.watchers, k)
	}
}

// setNode stores n (added or modified) and tells the Nodes' watchers.
func (f *fakeAPI) setNode(n corev1.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	typ := "MODIFIED"
	if _, ok := f.nodes[n.Name]; !ok {
		typ = "ADDED"
	}
	f.rv++
	n.ResourceVersion = strconv.Itoa(f.rv)
	n.APIVersion, n.Kind = "v1", "Node"
	f.nodes[n.Name] = &n
	f.publish("nodes", typ, &n)
}

func (f *fakeAPI) setRollout(r *v1alpha1.FlexNodeRollout) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	r.ResourceVersion = strconv.Itoa(f.rv)
	r.APIVersion, r.Kind = "flexnode.azure.com/v1alpha1", v1alpha1.Kind
	f.rollouts[r.Name] = r
	f.publish("rollouts", "ADDED", r)
}

func (f *fakeAPI) getRollout(name string) *v1alpha1.FlexNodeRollout {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rollouts[name].DeepCopy()
}

func (f *fakeAPI) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	reply(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure",
		Reason: metav1.StatusReason(reason), Code: int32(code), Message: fmt.Sprintf("%s: %s", reason, msg)})
}
