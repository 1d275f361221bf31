package diag

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
)

// unitState is what systemd says about one unit.
type unitState struct {
	Active, Sub, Result, Since string
	Restarts                   int
}

func (u unitState) String() string {
	s := u.Active
	if u.Sub != "" {
		s += " (" + u.Sub + ")"
	}
	if u.Since != "" {
		s += " since " + u.Since
	}
	return s
}

// unitsProbe is the state of the units debug looks at: the machine's and
// the agent's on the host, containerd's and the kubelet's in the machine.
type unitsProbe struct {
	host       map[string]unitState
	hostErr    error
	machine    map[string]unitState
	machineErr error
}

var showProps = []string{"-p", "Id,ActiveState,SubState,Result,NRestarts,StateChangeTimestamp"}

func (e *Env) units(ctx context.Context) *unitsProbe {
	e.once.units.Do(func() { e.unitsRes = e.probeUnits(ctx) })
	return &e.unitsRes
}

func (e *Env) probeUnits(ctx context.Context) unitsProbe {
	var p unitsProbe
	mu := machine.ServiceName(e.machineName())
	out, err := e.run(ctx, "systemctl", append([]string{"show", mu, layout.AgentUnitName}, showProps...)...)
	if err != nil {
		p.hostErr = err
	} else {
		p.host = parseShow(out)
	}
	if st := p.host[mu]; st.Active != "active" {
		p.machineErr = fmt.Errorf("machine %s is not running (%s is %s)", e.machineName(), mu, orUnknown(st.Active))
		return p
	}
	out, err = e.control().Exec(ctx, e.machineName(), append([]string{"systemctl", "show", node.ContainerdUnitName, node.KubeletUnitName}, showProps...)...)
	if err != nil {
		p.machineErr = err
		return p
	}
	p.machine = parseShow(out)
	return p
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// parseShow reads `systemctl show` of several units: blocks of key=value
// lines separated by a blank line, each with its Id.
func parseShow(out []byte) map[string]unitState {
	units := map[string]unitState{}
	var id string
	var u unitState
	flush := func() {
		if id != "" {
			units[id] = u
		}
		id, u = "", unitState{}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			flush()
			continue
		}
		switch k {
		case "Id":
			id = v
		case "ActiveState":
			u.Active = v
		case "SubState":
			u.Sub = v
		case "Result":
			u.Result = v
		case "NRestarts":
			u.Restarts, _ = strconv.Atoi(v)
		case "StateChangeTimestamp":
			u.Since = v
		}
	}
	flush()
	return units
}

// kubeletProbe is the kubelet's configuration as the machine holds it:
// what it rotates, when it evicts, which taints it registers with.
type kubeletProbe struct {
	config *kubeletv1beta1.KubeletConfiguration
	err    error
}

func (e *Env) kubeletConfig() *kubeletProbe {
	e.once.kubelet.Do(func() {
		data, err := fsutil.ReadFileIn(e.machineRoot(), node.KubeletConfigFile, 1<<20)
		if err != nil {
			e.kubelet.err = fmt.Errorf("read %s in machine %s: %w", node.KubeletConfigFile, e.machineName(), err)
			return
		}
		var kc kubeletv1beta1.KubeletConfiguration
		if err := yaml.Unmarshal(data, &kc); err != nil {
			e.kubelet.err = fmt.Errorf("%s in machine %s: %w", node.KubeletConfigFile, e.machineName(), err)
			return
		}
		e.kubelet.config = &kc
	})
	return &e.kubelet
}
