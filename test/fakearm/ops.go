package fakearm

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"
)

// operation is one asynchronous PUT: answered InProgress for polls
// polls, then ended as fail says (nil: Succeeded).
type operation struct {
	id, machine string
	polls       int
	fail        *Failure
	status      string
	start, end  time.Time
}

// put creates or updates a Machine under its preconditions and answers
// with ARM's async pattern: 201 (created) or 200 (updated) with the
// Machine in a non-terminal provisioningState, Azure-AsyncOperation
// naming its operation, and Retry-After.
func (s *Server) put(w http.ResponseWriter, r *http.Request, id string) {
	body, err := readBody(r)
	if err != nil {
		armError(w, http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: "+err.Error())
		return
	}
	props, _ := body["properties"].(map[string]any)
	if props == nil {
		armError(w, http.StatusBadRequest, "InvalidRequestContent", "The request content has no properties.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machines[key(id)]
	switch inm, im := r.Header.Get("If-None-Match"), r.Header.Get("If-Match"); {
	case inm == "*" && m != nil:
		armError(w, http.StatusPreconditionFailed, "PreconditionFailed", fmt.Sprintf("Machine %s already exists (If-None-Match: *).", id))
		return
	case im != "" && (m == nil || strings.Trim(im, `"`) != m.etag):
		armError(w, http.StatusPreconditionFailed, "PreconditionFailed", fmt.Sprintf("The eTag %s of If-Match does not match the Machine %s's.", im, id))
		return
	}
	status, state := http.StatusOK, "Updating"
	if m == nil {
		m = &machine{id: id, name: path.Base(id)}
		s.machines[key(id)] = m
		status, state = http.StatusCreated, "Creating"
	}
	if old, _ := m.props["kubernetes"].(map[string]any); s.keepVersion && old != nil {
		if k, ok := props["kubernetes"].(map[string]any); ok {
			k["orchestratorVersion"] = old["orchestratorVersion"]
		}
		s.keepVersion = false
	}
	delete(props, "provisioningState")
	delete(props, "eTag")
	delete(props, "status")
	m.props, m.etag, m.provErr = props, newETag(), nil
	if s.pollsToComplete == 0 && s.failNext == nil {
		s.finish(m, nil)
		writeJSON(w, status, m.json())
		return
	}
	op := &operation{id: newETag(), machine: key(id), polls: s.pollsToComplete, fail: s.failNext, status: "InProgress", start: time.Now()}
	s.failNext = nil
	s.ops[op.id] = op
	m.state = state
	sub := strings.Split(strings.TrimPrefix(id, "/"), "/")[1]
	w.Header().Set("Azure-AsyncOperation", fmt.Sprintf("%s/subscriptions/%s/providers/Microsoft.ContainerService/locations/%s/operations/%s?api-version=%s",
		s.URL, sub, s.o.Location, op.id, r.URL.Query().Get("api-version")))
	if s.pollRetryAfter != "" {
		w.Header().Set("Retry-After", s.pollRetryAfter)
	}
	writeJSON(w, status, m.json())
}

// finish ends a Machine's operation: Succeeded with its current version
// set to its goal, or as the failure says.
func (s *Server) finish(m *machine, f *Failure) {
	if f != nil {
		m.state = f.State
		if m.state == "" {
			m.state = "Failed"
		}
		m.provErr = map[string]any{"code": f.ProvisioningCode, "message": f.ProvisioningMsg}
		return
	}
	m.state = "Succeeded"
	if k, ok := m.props["kubernetes"].(map[string]any); ok {
		k["currentOrchestratorVersion"] = k["orchestratorVersion"]
	}
}

// getOperation answers an operation's status document.
func (s *Server) getOperation(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	op := s.ops[id]
	if op == nil {
		armError(w, http.StatusNotFound, "NotFound", "Operation "+id+" not found.")
		return
	}
	if op.status == "InProgress" {
		if op.polls--; op.polls <= 0 {
			op.status, op.end = "Succeeded", time.Now()
			if op.fail != nil {
				op.status = op.fail.State
				if op.status == "" {
					op.status = "Failed"
				}
			}
			if m := s.machines[op.machine]; m != nil {
				s.finish(m, op.fail)
			}
		} else if s.pollRetryAfter != "" {
			w.Header().Set("Retry-After", s.pollRetryAfter)
		}
	}
	doc := map[string]any{"id": r.URL.Path, "name": op.id, "status": op.status, "startTime": op.start.UTC().Format(time.RFC3339)}
	if !op.end.IsZero() {
		doc["endTime"] = op.end.UTC().Format(time.RFC3339)
	}
	if op.fail != nil && op.status != "InProgress" {
		doc["error"] = map[string]any{"code": op.fail.Code, "message": op.fail.Message}
	}
	writeJSON(w, http.StatusOK, doc)
}

// SetMachine stores a Machine as if created earlier (Succeeded), with
// properties.kubernetes as given; it returns the eTag.
func (s *Server) SetMachine(id string, kubernetes map[string]any) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &machine{id: id, name: path.Base(id), props: map[string]any{"kubernetes": kubernetes}, etag: newETag()}
	s.finish(m, nil)
	s.machines[key(id)] = m
	return m.etag
}

// Machine is the stored Machine's JSON (nil when there is none).
func (s *Server) Machine(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.machines[key(id)]; m != nil {
		return m.json()
	}
	return nil
}

// Update changes a stored Machine's properties.kubernetes as an admin's
// `az aks machine update` would, with a new eTag; false when there is no
// such Machine.
func (s *Server) Update(id string, edit func(kubernetes map[string]any)) (etag string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machines[key(id)]
	if m == nil {
		return "", false
	}
	k, _ := m.props["kubernetes"].(map[string]any)
	if k == nil {
		k = map[string]any{}
		m.props["kubernetes"] = k
	}
	edit(k)
	m.etag = newETag()
	return m.etag, true
}

// Remove deletes a stored Machine as an admin's `az aks machine delete`
// would; false when there is no such Machine.
func (s *Server) Remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.machines[key(id)] == nil {
		return false
	}
	delete(s.machines, key(id))
	return true
}

// deleteMachines is the pool's deleteMachines action: body
// {"machineNames": [...]}, answered 202 with Location and
// Azure-AsyncOperation; the Machines are gone at once and the operation
// ends Succeeded at its first poll.
func (s *Server) deleteMachines(w http.ResponseWriter, r *http.Request, pool string) {
	body, err := readBody(r)
	names, _ := body["machineNames"].([]any)
	if err != nil || len(names) == 0 {
		armError(w, http.StatusBadRequest, "InvalidRequestContent", "The request content must name machineNames.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		name, _ := n.(string)
		if s.machines[key(pool+"/machines/"+name)] == nil {
			armError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("Machine %s not found in agent pool %s.", name, path.Base(pool)))
			return
		}
	}
	for _, n := range names {
		delete(s.machines, key(pool+"/machines/"+n.(string)))
	}
	op := &operation{id: newETag(), polls: 1, status: "InProgress", start: time.Now()}
	s.ops[op.id] = op
	sub := strings.Split(strings.TrimPrefix(pool, "/"), "/")[1]
	u := fmt.Sprintf("%s/subscriptions/%s/providers/Microsoft.ContainerService/locations/%s/operations/%s?api-version=%s", s.URL, sub, s.o.Location, op.id, r.URL.Query().Get("api-version"))
	w.Header().Set("Azure-AsyncOperation", u)
	w.Header().Set("Location", u)
	w.WriteHeader(http.StatusAccepted)
}
