package metrics

import "testing"

// The status writer's gauge follows the election and its writes are
// counted by result; a nil registry takes both.
func TestStatusWriterMetrics(t *testing.T) {
	reg := NewRegistry(testLayout(t, true))
	reg.StatusWriter(true)
	reg.StatusWritten("ok")
	reg.StatusWritten("ok")
	reg.StatusWritten("conflict")
	fams := scrape(t, reg)
	if g := fams["aks_flex_node_fleet_status_writer"].GetMetric()[0].GetGauge().GetValue(); g != 1 {
		t.Errorf("writer gauge %v while elected", g)
	}
	writes := map[string]float64{}
	for _, m := range fams["aks_flex_node_fleet_status_writes_total"].GetMetric() {
		writes[label(m, "result")] = m.GetCounter().GetValue()
	}
	if writes["ok"] != 2 || writes["conflict"] != 1 {
		t.Errorf("writes %v", writes)
	}
	reg.StatusWriter(false)
	if g := scrape(t, reg)["aks_flex_node_fleet_status_writer"].GetMetric()[0].GetGauge().GetValue(); g != 0 {
		t.Errorf("writer gauge %v after stepping down", g)
	}
	var none *Registry
	none.StatusWriter(true)
	none.StatusWritten("ok")
}
