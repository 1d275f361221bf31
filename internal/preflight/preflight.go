// Package preflight owns the checks that run before a host joins a cluster
// and the framework that runs them: names, severities, remedies, the
// --ignore-preflight-errors rule, and kubeadm-style text and JSON reports.
//
// Preflight tells the truth and changes nothing: every check looks, none
// repairs. The one write it makes is a throwaway executable in a temp dir
// it creates and removes (host-layout), because "can the agent binary run
// from here" has no other honest answer. It loads no kernel module and
// creates no device node. What it finds about the layout becomes an error
// that says which agent.hostPrefix to declare; it never relocates anything
// (the prefix is declared, never inferred).
package preflight

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/pflag"
)

// Severity is how bad a result is.
type Severity string

const (
	SeverityOK      Severity = "ok"
	SeverityWarning Severity = "warning"
	SeverityError   Severity = "error"
)

// Result is what one check found. Remedy says what to do; it is set for
// every warning and error.
type Result struct {
	Severity Severity
	Message  string
	Remedy   string
}

// OK, Warning and Error build results.
func OK(format string, args ...any) Result {
	return Result{Severity: SeverityOK, Message: fmt.Sprintf(format, args...)}
}

func Warning(remedy, format string, args ...any) Result {
	return Result{Severity: SeverityWarning, Message: fmt.Sprintf(format, args...), Remedy: remedy}
}

func Error(remedy, format string, args ...any) Result {
	return Result{Severity: SeverityError, Message: fmt.Sprintf(format, args...), Remedy: remedy}
}

// Check is one preflight check. Name is stable kebab-case: users put it in
// --ignore-preflight-errors and scripts read it from JSON. Target names
// what the check looks at (paths, a URL, a config key).
type Check interface {
	Name() string
	Target() string
	Run(ctx context.Context) Result
}

type funcCheck struct {
	name, target string
	run          func(ctx context.Context) Result
}

func (c funcCheck) Name() string                   { return c.name }
func (c funcCheck) Target() string                 { return c.target }
func (c funcCheck) Run(ctx context.Context) Result { return c.run(ctx) }

// NewCheck makes a Check from a function.
func NewCheck(name, target string, run func(ctx context.Context) Result) Check {
	return funcCheck{name: name, target: target, run: run}
}

// IgnoreAll in --ignore-preflight-errors makes every error non-fatal but
// those of the checks that must be named (explicitIgnoreOnly).
const IgnoreAll = "all"

// Options control how results become a verdict.
type Options struct {
	// IgnoreErrors are check names (or "all") whose errors are reported
	// as warnings instead of failing the run.
	IgnoreErrors []string
	// FailOnWarnings makes any remaining warning fail the run.
	FailOnWarnings bool
}

// AddFlags registers --ignore-preflight-errors and --fail-on-warnings, so
// every command that runs preflight (preflight, start) spells them alike.
// Call Options.Validate(DefaultNames) after parsing; a failure is a usage
// error (exit 2).
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringSliceVar(&o.IgnoreErrors, "ignore-preflight-errors", nil,
		"preflight checks whose errors are shown as warnings, comma-separated (e.g. swap,kernel-modules), or 'all'")
	fs.BoolVar(&o.FailOnWarnings, "fail-on-warnings", false, "treat preflight warnings as fatal")
}

// UnknownCheckError is a name in --ignore-preflight-errors that is not a
// check: a usage error, since a typo would silently leave the error fatal
// (or, worse, the user believing it was ignored).
type UnknownCheckError struct {
	Names []string
	Known []string
}

func (e *UnknownCheckError) Error() string {
	return fmt.Sprintf("--ignore-preflight-errors: unknown check %s; known checks: %s, or %s",
		strings.Join(quoteAll(e.Names), ", "), strings.Join(e.Known, ", "), IgnoreAll)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// Validate normalises IgnoreErrors (lowercase, trimmed, empty entries
// dropped, as kubeadm reads them) and rejects names not in known.
func (o *Options) Validate(known []string) error {
	isKnown := map[string]bool{IgnoreAll: true}
	for _, k := range known {
		isKnown[k] = true
	}
	var norm, unknown []string
	for _, n := range o.IgnoreErrors {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		if !isKnown[n] {
			unknown = append(unknown, n)
		}
		norm = append(norm, n)
	}
	o.IgnoreErrors = norm
	if len(unknown) > 0 {
		return &UnknownCheckError{Names: unknown, Known: append([]string(nil), known...)}
	}
	return nil
}

func (o Options) ignored(name string) bool {
	for _, n := range o.IgnoreErrors {
		if n == name || (n == IgnoreAll && !explicitIgnoreOnly[name]) {
			return true
		}
	}
	return false
}

// CheckResult is one line of the report.
type CheckResult struct {
	Name     string   `json:"name"`
	Target   string   `json:"target"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
	Remedy   string   `json:"remedy"`
	// Ignored is true for an error made non-fatal by
	// --ignore-preflight-errors; Severity stays "error" so JSON readers
	// see what was found.
	Ignored bool `json:"ignored"`
}

// Summary counts results. Ignored errors count as warnings, which is how
// they are shown, and are also counted on their own.
type Summary struct {
	OK       int `json:"ok"`
	Warnings int `json:"warnings"`
	Errors   int `json:"errors"`
	Ignored  int `json:"ignored"`
}

// Report is the outcome of a run, in registration order.
type Report struct {
	Status  string        `json:"status"` // "ok" or "failed"
	Checks  []CheckResult `json:"checks"`
	Summary Summary       `json:"summary"`
}

const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// Run runs the checks concurrently and reports them in the order given.
// A check that panics is reported as an error rather than taking the
// command down with it.
func Run(ctx context.Context, checks []Check, opts Options) Report {
	results := make([]CheckResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = CheckResult{Name: c.Name(), Target: c.Target()}
			r := runOne(ctx, c)
			results[i].Severity, results[i].Message, results[i].Remedy = r.Severity, r.Message, r.Remedy
		}()
	}
	wg.Wait()

	rep := Report{Checks: results}
	for i := range rep.Checks {
		cr := &rep.Checks[i]
		switch cr.Severity {
		case SeverityOK:
			rep.Summary.OK++
		case SeverityWarning:
			rep.Summary.Warnings++
		default:
			cr.Severity = SeverityError
			if opts.ignored(cr.Name) {
				cr.Ignored = true
				rep.Summary.Ignored++
				rep.Summary.Warnings++
			} else {
				rep.Summary.Errors++
			}
		}
	}
	rep.Status = StatusOK
	if rep.Failed(opts.FailOnWarnings) {
		rep.Status = StatusFailed
	}
	return rep
}

func runOne(ctx context.Context, c Check) (r Result) {
	defer func() {
		if p := recover(); p != nil {
			r = Error("report this as a bug in aks-flex-node, with the output above",
				"check %s panicked: %v\n%s", c.Name(), p, debug.Stack())
		}
	}()
	if err := ctx.Err(); err != nil {
		return Error("run preflight again", "not run: %v", err)
	}
	return c.Run(ctx)
}

// Failed reports whether an error remains (or, with failOnWarnings, a
// warning, ignored errors included).
func (r Report) Failed(failOnWarnings bool) bool {
	return r.Summary.Errors > 0 || (failOnWarnings && r.Summary.Warnings > 0)
}

// WriteText writes the report the way kubeadm does: one line per check
// that passed or warned, then the fatal errors, then how to make them
// non-fatal.
func (r Report) WriteText(w io.Writer) error {
	ew := NewTextWriter(w)
	ew.Printf("[preflight] Running preflight checks\n")
	var errs []CheckResult
	for _, c := range r.Checks {
		if c.Severity != SeverityOK && c.Severity != SeverityWarning && !c.Ignored {
			errs = append(errs, c)
			continue
		}
		ew.Check("", c)
	}
	if len(errs) > 0 {
		ew.Printf("[preflight] Some fatal errors occurred:\n")
		names := make([]string, len(errs))
		for i, c := range errs {
			ew.Check("\t", c)
			names[i] = c.Name
		}
		ew.Printf("[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=%s`\n", strings.Join(names, ","))
	}
	s := r.Summary
	ew.Printf("[preflight] %d ok, %d warnings, %d errors", s.OK, s.Warnings, s.Errors)
	if s.Ignored > 0 {
		ew.Printf(" (%d ignored)", s.Ignored)
	}
	ew.Printf(": %s\n", r.Status)
	if len(errs) == 0 && r.Status == StatusFailed {
		ew.Printf("[preflight] Warnings are fatal with --fail-on-warnings\n")
	}
	return ew.Err()
}

// Names returns the names of checks, in order.
func Names(checks []Check) []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.Name()
	}
	return out
}

// sortedKeys is for messages that list map contents: stable output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
