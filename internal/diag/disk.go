package diag

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// The directories the kubelet measures inside the machine: its own
// (nodefs) and containerd's, where images live (imagefs).
const (
	kubeletRootDir    = "/var/lib/kubelet"
	containerdRootDir = "/var/lib/containerd"
)

// The kubelet's hard eviction defaults, used when its config sets none.
var defaultEviction = map[string]string{
	"nodefs.available": "10%", "nodefs.inodesFree": "5%",
	"imagefs.available": "15%", "imagefs.inodesFree": "5%",
}

// warnMargin is how close (in percentage points of the filesystem) to an
// eviction threshold a warning starts.
const warnMargin = 5.0

type fsUsage struct {
	dir                     string
	fsid                    unix.Fsid
	size, avail             uint64
	inodes, inodesFree      uint64
	availPct, inodesFreePct float64
}

// statIn is statfs of dir inside the machine, through a descriptor opened
// confined to its root.
func (e *Env) statIn(dir string) (fsUsage, error) {
	r, err := fsroot.OpenDir(e.machineRoot(), dir)
	if err != nil {
		return fsUsage{}, err
	}
	defer r.Close()
	f, err := r.Open(".")
	if err != nil {
		return fsUsage{}, err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fsUsage{}, fmt.Errorf("statfs %s in machine %s: %w", dir, e.machineName(), err)
	}
	u := fsUsage{dir: dir, fsid: st.Fsid, size: st.Blocks * uint64(st.Bsize), avail: st.Bavail * uint64(st.Bsize), inodes: st.Files, inodesFree: st.Ffree}
	if st.Blocks > 0 {
		u.availPct = 100 * float64(st.Bavail) / float64(st.Blocks)
	}
	u.inodesFreePct = 100
	if st.Files > 0 {
		u.inodesFreePct = 100 * float64(st.Ffree) / float64(st.Files)
	}
	return u, nil
}

// checkDiskPressure: the machine's filesystems (the kubelet's and the
// images') are clear of the kubelet's eviction thresholds and of image
// garbage collection.
func checkDiskPressure(e *Env) preflight.Check {
	return preflight.NewCheck(NameDiskPressure, kubeletRootDir+" and "+containerdRootDir+" in the machine", func(context.Context) preflight.Result {
		nodefs, err := e.statIn(kubeletRootDir)
		if err != nil {
			return preflight.Error("aks-flex-node start provisions the machine; check "+e.Layout.MachineDir(e.machineName()), "%v", err)
		}
		imagefs, err := e.statIn(containerdRootDir)
		if err != nil {
			imagefs = nodefs
		}
		thresholds := map[string]string{}
		for k, v := range defaultEviction {
			thresholds[k] = v
		}
		gcHigh := int32(85)
		if kc := e.kubeletConfig().config; kc != nil {
			for k, v := range kc.EvictionHard {
				thresholds[k] = v
			}
			if kc.ImageGCHighThresholdPercent != nil {
				gcHigh = *kc.ImageGCHighThresholdPercent
			}
		}
		var errs, warns, oks []string
		judge := func(kind string, u fsUsage) {
			for _, m := range []struct {
				signal string
				pct    float64
				total  uint64
				what   string
			}{{kind + ".available", u.availPct, u.size, "space"}, {kind + ".inodesFree", u.inodesFreePct, u.inodes, "inodes"}} {
				limit, ok := percentOf(thresholds[m.signal], m.total)
				if !ok {
					continue
				}
				switch {
				case m.pct < limit:
					errs = append(errs, fmt.Sprintf("%s %.1f%% %s free, below the kubelet's eviction threshold %s<%s", u.dir, m.pct, m.what, m.signal, thresholds[m.signal]))
				case m.pct < limit+warnMargin:
					warns = append(warns, fmt.Sprintf("%s %.1f%% %s free, near the eviction threshold %s<%s", u.dir, m.pct, m.what, m.signal, thresholds[m.signal]))
				}
			}
		}
		// On one filesystem the kubelet applies both sets of thresholds.
		judge("nodefs", nodefs)
		judge("imagefs", imagefs)
		oks = append(oks, describeFS(nodefs))
		if imagefs.fsid != nodefs.fsid {
			oks = append(oks, describeFS(imagefs))
		} else {
			oks = append(oks, "images on the same filesystem")
		}
		if used := 100 - imagefs.availPct; used >= float64(gcHigh) {
			warns = append(warns, fmt.Sprintf("images' filesystem %.0f%% used, at or above imageGCHighThresholdPercent %d: the kubelet is deleting unused images", used, gcHigh))
		}
		remedy := "free space in " + e.Layout.MachinesDir() + " on this host (old images: crictl rmi --prune in the machine; logs; other data on that filesystem) or grow it"
		switch {
		case len(errs) > 0:
			return preflight.Error(remedy, "machine %s: %s", e.machineName(), strings.Join(append(errs, warns...), "; "))
		case len(warns) > 0:
			return preflight.Warning(remedy, "machine %s: %s", e.machineName(), strings.Join(warns, "; "))
		}
		return preflight.OK("machine %s: %s", e.machineName(), strings.Join(oks, "; "))
	})
}

func describeFS(u fsUsage) string {
	return fmt.Sprintf("%s %.0f%% free (%s of %s), %.0f%% inodes free", u.dir, u.availPct, gib(u.avail), gib(u.size), u.inodesFreePct)
}

func gib(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB" }

// percentOf reads an eviction threshold ("10%" or a quantity such as
// "1Gi") as a percentage of total.
func percentOf(v string, total uint64) (float64, bool) {
	if v == "" || total == 0 {
		return 0, false
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		return f, err == nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, false
	}
	return 100 * q.AsApproximateFloat64() / float64(total), true
}
