package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// TestUpgradeKill9AtEveryStep kills agent-upgrade, then the new agent, with
// SIGKILL at each step the code names, and checks the host converges.
func TestUpgradeKill9AtEveryStep(t *testing.T) {
	t.Parallel()
	u := newUpgradeHost(t, aclhost.ACL, aclPrefix, "fp1", "kill")
	for _, step := range agentupgrade.UpgradeSteps {
		t.Run(step, func(t *testing.T) {
			from, cand := u.status(t).Current.Slot, u.otherFP(t)
			_, errOut, code, _ := u.upgradeTo(t, []string{failpoint.EnvPoints + "=" + step + ":kill"}, cand, "--deadline", "6s", "--allow-downgrade")
			if !strings.Contains(errOut, "failpoint "+step+": kill") || code == 0 {
				t.Fatalf("agent-upgrade was not killed at %s (exit %d):\n%s", step, code, errOut)
			}
			s := u.converge(t)
			u.checkLastGood(t, s, from, cand)
			t.Logf("after kill -9 at %s: current %s (%s), last %+v", step, s.Current.Slot, s.CurrentVersion, s.Last)
		})
	}
	for _, step := range agentupgrade.AgentSteps {
		t.Run(step, func(t *testing.T) {
			dir := "/var/tmp/failpoints-kill-" + step
			u.setAgentFailpoint(t, step+":kill", dir)
			defer u.clearAgentFailpoint(t)
			from, cand := u.status(t).Current.Slot, u.otherFP(t)
			out, errOut, code, _ := u.upgradeTo(t, nil, cand, "--deadline", "20s", "--allow-downgrade")
			if _, err := os.Stat(u.Path(dir + "/" + step + ".reached")); err != nil {
				u.dumpUpgrade(t)
				t.Fatalf("the agent never reached %s (exit %d):\n%s\n%s", step, code, out, errOut)
			}
			s := u.converge(t)
			u.checkLastGood(t, s, from, cand)
			t.Logf("after kill -9 of the agent at %s: agent-upgrade exit %d, current %s (%s), last %+v", step, code, s.Current.Slot, s.CurrentVersion, s.Last)
		})
	}
	assertNothingUnderUsr(t, u.Host)
}

// TestUpgradePowerCutAtEveryStep freezes the upgrade (agent-upgrade, then
// the new agent) at each step and cuts the host's power there, then boots
// it again and checks it converges.
func TestUpgradePowerCutAtEveryStep(t *testing.T) {
	t.Parallel()
	u := newUpgradeHost(t, aclhost.ACL, aclPrefix, "fp1", "power")
	agentStep := map[string]bool{}
	for _, s := range agentupgrade.AgentSteps {
		agentStep[s] = true
	}
	for _, step := range append(append([]string{}, agentupgrade.UpgradeSteps...), agentupgrade.AgentSteps...) {
		t.Run(step, func(t *testing.T) {
			dir := "/var/tmp/failpoints-power-" + step
			env := []string{failpoint.EnvDir + "=" + dir}
			if agentStep[step] {
				u.setAgentFailpoint(t, step+":hang", dir)
			} else {
				env = append(env, failpoint.EnvPoints+"="+step+":hang")
			}
			from, cand := u.status(t).Current.Slot, u.otherFP(t)
			args := append([]string{"env"}, env...)
			args = append(args, u.bin, "agent-upgrade", "--config", u.cfg, "--binary", "/root/dist/"+cand,
				"--sha256", fileSHA256(t, buildPath(cand)), "--deadline", "12s", "--allow-downgrade")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := u.Command(ctx, args...)
			must(t, cmd.Start())
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() { cancel(); <-done }()
			reached := dir + "/" + step + ".reached"
			wait := time.Now().Add(60 * time.Second)
			for {
				if _, err := os.Stat(u.Path(reached)); err == nil {
					break
				}
				if time.Now().After(wait) {
					u.dumpUpgrade(t)
					t.Fatalf("%s never reached", step)
				}
				time.Sleep(100 * time.Millisecond)
			}
			must(t, u.PowerCycle(context.Background()))
			s := u.converge(t)
			u.checkLastGood(t, s, from, cand)
			if agentStep[step] {
				u.clearAgentFailpoint(t)
			}
			t.Logf("after a power cut at %s: current %s (%s), last %+v", step, s.Current.Slot, s.CurrentVersion, s.Last)
		})
	}
	assertNothingUnderUsr(t, u.Host)
}
