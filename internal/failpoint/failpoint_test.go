package failpoint

import (
	"os"
	"testing"
)

// Product builds (no failpoints tag) ignore the environment: a failpoint
// set on a production host does nothing.
func TestProductBuildIgnoresFailpoints(t *testing.T) {
	if Enabled {
		t.Skip("failpoints build")
	}
	t.Setenv(EnvPoints, "x:kill,y:skip")
	if Hit("x") || Hit("y") {
		t.Fatal("a product build acted on a failpoint")
	}
	if os.Getenv(EnvPoints) == "" {
		t.Fatal("env not set")
	}
}
