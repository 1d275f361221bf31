package fakearm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// SetBootstrapData makes pool (its resource ID) answer listBootstrapData
// with data: the pool's join data, a config in upstream's layout, as
// the AgentPools_ListBootstrapData example of the 2026-05-02-preview API
// documents it (azure.bootstrapToken, azure.targetCluster,
// components, networking, node.kubelet.clusterFQDN and caCertData).
func (s *Server) SetBootstrapData(pool string, data map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bootstrap[key(pool)] = data
}

// listBootstrapData answers POST <pool>/listBootstrapData: the request
// is a JSON object (the documented ListBootstrapDataRequest has no
// required field), the answer the pool's data or ARM's 404.
func (s *Server) listBootstrapData(w http.ResponseWriter, r *http.Request, pool string) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var req map[string]any
	if err != nil || json.Unmarshal(data, &req) != nil || req == nil {
		armError(w, http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: want a ListBootstrapDataRequest object.")
		return
	}
	s.mu.Lock()
	d, ok := s.bootstrap[key(pool)]
	s.mu.Unlock()
	if !ok {
		armError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("Agent pool %s not found.", pool))
		return
	}
	writeJSON(w, http.StatusOK, d)
}
