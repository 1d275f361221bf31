package lifecycle

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type importImages struct{ machine Machine }

// ImportImages returns the task that imports the image archives installed
// into the machine (the pause image, for one) into its containerd, once
// containerd answers; archives already imported are skipped.
func ImportImages(m Machine) task.Task { return &importImages{machine: m} }

func (t *importImages) Name() string { return "import-images" }

func (t *importImages) Do(ctx context.Context) (task.Result, error) {
	m := t.machine
	archives, err := node.ImageArchives(m.Root())
	if err != nil || len(archives) == 0 {
		return task.Result{}, err
	}
	// containerd starts with the machine; give it a bounded time.
	err = wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := m.exec(ctx, node.CtrBinary, "version")
		return err == nil, nil
	})
	if err != nil {
		return task.Result{}, fmt.Errorf("containerd in %s not answering after 1m; %s", m.Name, m.logHint("containerd"))
	}
	// Archives already imported are skipped without listing the images
	// again: on a converged host this task runs ctr twice in all.
	changed, err := node.ImportImagesChanged(ctx, m.Root(), m.exec, archives)
	if err != nil {
		return task.Result{}, err
	}
	return task.Result{Changed: changed, Detail: fmt.Sprintf("%d archive(s)", len(archives))}, nil
}
