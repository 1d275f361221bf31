package fakearm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machineType is the Machine's ARM resource type.
const machineType = "Microsoft.ContainerService/managedClusters/agentPools/machines"

// machine is one stored Machine: the properties as last PUT, and what
// ARM adds (eTag, provisioningState, status).
type machine struct {
	id, name string
	props    map[string]any
	etag     string
	state    string
	provErr  map[string]any
}

func (m *machine) json() map[string]any {
	p := map[string]any{}
	for k, v := range m.props {
		p[k] = v
	}
	p["eTag"], p["provisioningState"] = m.etag, m.state
	if m.provErr != nil {
		p["status"] = map[string]any{"provisioningError": m.provErr}
	}
	return map[string]any{"id": m.id, "name": m.name, "type": machineType, "properties": p}
}

// route is what a path names.
type route struct {
	kind Kind
	// id is the Machine's resource ID (KindMachine), the pool's machines
	// collection (KindList) or the operation's ID (KindOperation).
	id string
}

// parseRoute reads the machine API's paths; ARM compares the fixed
// segments case-insensitively.
func parseRoute(path string) (route, bool) {
	seg := strings.Split(strings.TrimPrefix(path, "/"), "/")
	fixed := func(want ...string) bool {
		for i, w := range want {
			if w != "*" && (i >= len(seg) || !strings.EqualFold(seg[i], w)) {
				return false
			}
		}
		return true
	}
	switch {
	case len(seg) == 8 && fixed("subscriptions", "*", "providers", "Microsoft.ContainerService", "locations", "*", "operations"):
		return route{KindOperation, seg[7]}, true
	case len(seg) == 11 && fixed("subscriptions", "*", "resourceGroups", "*", "providers", "Microsoft.ContainerService", "managedClusters", "*", "agentPools", "*", "deleteMachines"):
		return route{KindDeleteMachines, strings.TrimSuffix(path, "/"+seg[10])}, true
	case len(seg) == 11 && fixed("subscriptions", "*", "resourceGroups", "*", "providers", "Microsoft.ContainerService", "managedClusters", "*", "agentPools", "*", "listBootstrapData"):
		return route{KindBootstrapData, strings.TrimSuffix(path, "/"+seg[10])}, true
	case len(seg) == 11 && fixed("subscriptions", "*", "resourceGroups", "*", "providers", "Microsoft.ContainerService", "managedClusters", "*", "agentPools", "*", "machines"):
		return route{KindList, path}, true
	case len(seg) == 12 && fixed("subscriptions", "*", "resourceGroups", "*", "providers", "Microsoft.ContainerService", "managedClusters", "*", "agentPools", "*", "machines"):
		return route{KindMachine, path}, true
	}
	return route{}, false
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := parseRoute(r.URL.Path)
	req := Request{Method: r.Method, Path: r.URL.Path, APIVersion: r.URL.Query().Get("api-version"),
		IfMatch: r.Header.Get("If-Match"), IfNoneMatch: r.Header.Get("If-None-Match"), Kind: rt.kind, At: time.Now()}
	appID, status, code, msg := s.authenticate(r)
	req.AppID = appID
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	switch {
	case status != 0:
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"`)
		}
		armError(w, status, code, msg)
		return
	case !ok:
		armError(w, http.StatusNotFound, "InvalidResourceType", "The resource type could not be found in the namespace 'Microsoft.ContainerService'.")
		return
	case req.APIVersion == "":
		armError(w, http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
		return
	case !slices.Contains(s.o.APIVersions, req.APIVersion):
		armError(w, http.StatusBadRequest, "NoRegisteredProviderFound", fmt.Sprintf("No registered resource provider found for location '%s' and API version '%s' for type 'managedClusters/agentPools/machines'. The supported api-versions are '%s'.", s.o.Location, req.APIVersion, strings.Join(s.o.APIVersions, ", ")))
		return
	}
	if s.fault(w, r, rt.kind) {
		return
	}
	switch {
	case rt.kind == KindOperation && r.Method == http.MethodGet:
		s.getOperation(w, r, rt.id)
	case rt.kind == KindList && r.Method == http.MethodGet:
		s.list(w, r, rt.id)
	case rt.kind == KindMachine && r.Method == http.MethodGet:
		s.get(w, rt.id)
	case rt.kind == KindMachine && r.Method == http.MethodPut:
		s.put(w, r, rt.id)
	case rt.kind == KindDeleteMachines && r.Method == http.MethodPost:
		s.deleteMachines(w, r, rt.id)
	case rt.kind == KindBootstrapData && r.Method == http.MethodPost:
		s.listBootstrapData(w, r, rt.id)
	case rt.kind == KindMachine && r.Method == http.MethodDelete:
		s.delete(w, rt.id)
	default:
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The method "+r.Method+" is not allowed here.")
	}
}

// authenticate checks the bearer token: 401 InvalidAuthenticationToken
// as ARM answers a missing, malformed or foreign one.
func (s *Server) authenticate(r *http.Request) (appID string, status int, code, msg string) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing."
	}
	if s.o.Tokens == nil {
		return "", http.StatusUnauthorized, "InvalidAuthenticationToken", "The fake has no tenant to check tokens against."
	}
	app, _, err := s.o.Tokens.Verify(tok, s.o.Audience)
	if err != nil {
		return "", http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid: " + err.Error()
	}
	return app, 0, "", ""
}

// fault answers r with the first matching fault, if any.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, kind Kind) bool {
	s.mu.Lock()
	var f *Fault
	for i, c := range s.faults {
		if (c.Method == "" || c.Method == r.Method) && (c.Kind == "" || c.Kind == kind) {
			cp := *c
			f = &cp
			if c.Times--; c.Times <= 0 {
				s.faults = slices.Delete(s.faults, i, i+1)
			}
			break
		}
	}
	s.mu.Unlock()
	if f == nil {
		return false
	}
	if f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return true
		}
	}
	if f.Status == 0 {
		return false
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	armError(w, f.Status, f.Code, f.Message)
	return true
}

// armError writes ARM's error envelope.
func armError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) get(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machines[key(id)]
	if m == nil {
		armError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("Machine %s not found.", id))
		return
	}
	writeJSON(w, http.StatusOK, m.json())
	if s.moveETag {
		s.moveETag = false
		m.etag = newETag()
	}
}

func (s *Server) delete(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.machines[key(id)] == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	delete(s.machines, key(id))
	w.WriteHeader(http.StatusOK)
}

// list answers a page of the pool's Machines, PageSize at a time, with
// nextLink ($skipToken) to the next page.
func (s *Server) list(w http.ResponseWriter, r *http.Request, collection string) {
	skip, _ := strconv.Atoi(r.URL.Query().Get("$skipToken"))
	s.mu.Lock()
	var all []map[string]any
	prefix := key(collection) + "/"
	for k, m := range s.machines {
		if strings.HasPrefix(k, prefix) {
			all = append(all, m.json())
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	page := map[string]any{"value": []map[string]any{}}
	if skip < len(all) {
		end := min(skip+s.o.PageSize, len(all))
		page["value"] = all[skip:end]
		if end < len(all) {
			page["nextLink"] = fmt.Sprintf("%s%s?api-version=%s&$skipToken=%d", s.URL, collection, r.URL.Query().Get("api-version"), end)
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// maxBody bounds a PUT's body.
const maxBody = 1 << 20

func readBody(r *http.Request) (map[string]any, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return v, nil
}
