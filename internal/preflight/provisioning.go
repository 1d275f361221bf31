package preflight

import (
	"context"
	"strings"

	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/ignition"
)

// provisioningPayloadCheck looks at what the host was given to provision it
// (Azure customData, IMDS userData). An Ignition config handed to a host that
// never runs Ignition is silently ignored by the platform and the host simply
// never joins; this is where that becomes an error someone reads.
func provisioningPayloadCheck(e *Env) Check {
	src := ignition.Sources{Root: e.Root}
	if e.Provisioning != nil {
		src = *e.Provisioning
		src.Root = e.Root
	}
	target := "customData " + orDefault(src.CustomData, ignition.DefaultCustomDataPath)
	switch {
	case src.IMDSSkipped != "":
		target += ", not IMDS (" + src.IMDSSkipped + ")"
	case src.IMDSEndpoint != "" && src.IMDSEndpoint != ignition.IMDSOff:
		target += ", IMDS userData at " + src.IMDSEndpoint
	}
	return NewCheck(NameProvisioningPayload, target, func(ctx context.Context) Result {
		fam := hostos.FamilyUnknown
		if o, _, err := hostos.ReadOSRelease(e.Root); err == nil {
			fam = hostos.Classify(o)
		}
		p := ignition.Inspect(ctx, src, fam)
		var errs, warns, remedies []string
		for _, pr := range p.Problems {
			if pr.Severity == "error" {
				errs = append(errs, pr.Message)
			} else {
				warns = append(warns, pr.Message)
			}
			remedies = appendUnique(remedies, pr.Remedy)
		}
		switch {
		case len(errs) > 0:
			return Error(strings.Join(remedies, "; "), "%s", strings.Join(append(errs, warns...), "; "))
		case len(warns) > 0:
			return Warning(strings.Join(remedies, "; "), "%s", strings.Join(warns, "; "))
		}
		if len(p.Payloads) == 0 {
			return OK("no provisioning payload found (%s)", strings.Join(p.Notes, "; "))
		}
		var found []string
		for _, pl := range p.Payloads {
			found = append(found, pl.Source+": "+pl.Describe())
		}
		return OK("%s, fine for this host (family %s)", strings.Join(found, "; "), fam)
	})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func appendUnique(ss []string, s string) []string {
	for _, x := range ss {
		if x == s {
			return ss
		}
	}
	return append(ss, s)
}
