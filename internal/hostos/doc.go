// Package hostos owns what the agent knows about the host it runs on: the
// os-release parser, the mapping of a distribution to a Family, and the
// capability probes (mount table, read-only /usr, writable directories,
// package manager, required tools, SELinux, systemd, systemd-nspawn,
// systemd-sysext overlays, cgroup mode) that preflight and install.sh report,
// and Runner, the one type for running a host command (systemctl,
// machinectl, nsenter, modprobe) that every package doing so takes.
//
// Every probe reports what it found and where it looked; nothing is inferred
// from the distribution name. The family is for messages and for choosing a
// package manager when one is present; it never decides where files go (the
// install prefix is declared, see internal/layout).
//
// Probes work on a root directory so tests, and image baking with --root,
// run against a tree that is not the running host. Probes whose answer only
// exists on the running host (the mount table, PID 1, running systemctl)
// are skipped when the root is not "/" and say so in the report's notes.
package hostos
