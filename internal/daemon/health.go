package daemon

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

// HealthStatus values.
const (
	StatusOK        = "ok"
	StatusUnhealthy = "unhealthy"
)

// LoopStatus is what the agent knows about one loop's passes.
type LoopStatus struct {
	Local        bool       `json:"local"`
	Runs         int        `json:"runs"`
	LastRun      time.Time  `json:"lastRun"`
	LastDuration string     `json:"lastDuration"`
	LastSuccess  *time.Time `json:"lastSuccess,omitempty"`
	LastError    string     `json:"lastError,omitempty"`
	LastErrorAt  *time.Time `json:"lastErrorAt,omitempty"`
	// Failing is true when the last pass failed.
	Failing bool `json:"failing"`
}

// HealthReport is the body of /healthz, which `aks-flex-node debug` reads
// too: the verdict, why, and each loop's last pass.
type HealthReport struct {
	Status     string                `json:"status"`
	Reason     string                `json:"reason,omitempty"`
	Version    string                `json:"version"`
	Started    time.Time             `json:"started"`
	WaitingFor string                `json:"waitingFor,omitempty"`
	Loops      map[string]LoopStatus `json:"loops"`
}

// Health is the agent's verdict on itself. It is unhealthy while a local
// loop's last pass failed: local loops need nothing remote, so their
// failure is the node's own (the machine cannot be started). A loop that
// needs the cluster failing, or the agent still waiting for the API
// server, shows in the report but is not unhealthy: the cluster being
// away is not this host being broken, and a restart would not help.
type Health struct {
	mu         sync.Mutex
	started    time.Time
	waitingFor string
	loops      map[string]*LoopStatus
}

// NewHealth is the health of an agent starting now.
func NewHealth() *Health { return &Health{started: time.Now(), loops: map[string]*LoopStatus{}} }

// waiting records what the agent waits for before its remote loops ("" when
// it waits no more).
func (h *Health) waiting(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waitingFor = what
}

// loopDone records one pass of loop l that began at began.
func (h *Health) loopDone(l Loop, began time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.loops[l.Name]
	if s == nil {
		s = &LoopStatus{Local: l.Local}
		h.loops[l.Name] = s
	}
	now := time.Now()
	s.Runs++
	s.LastRun, s.LastDuration = began, now.Sub(began).Round(time.Millisecond).String()
	s.Failing = err != nil
	if err != nil {
		s.LastError, s.LastErrorAt = err.Error(), &now
		return
	}
	s.LastSuccess = &now
}

// Report is the current verdict.
func (h *Health) Report() HealthReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := HealthReport{Status: StatusOK, Version: buildinfo.Version, Started: h.started, WaitingFor: h.waitingFor, Loops: map[string]LoopStatus{}}
	for name, s := range h.loops {
		r.Loops[name] = *s
		if s.Local && s.Failing && r.Reason == "" {
			r.Status, r.Reason = StatusUnhealthy, name+": "+s.LastError
		}
	}
	return r
}

// ServeHTTP answers /healthz: 200 and the report when healthy, 503 and
// the report when not.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r := h.Report()
	w.Header().Set("Content-Type", "application/json")
	if r.Status != StatusOK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}
