package agentupgrade

import "os/exec"

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
