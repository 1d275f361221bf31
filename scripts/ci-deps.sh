#!/usr/bin/env bash
# Installs the Debian packages the tests need. Idempotent; installs nothing
# when everything is present, so a warm machine pays no apt round trip.
set -euo pipefail

# inotify instances: each test host's systemd, journald and logind, and each
# control plane's kube-apiserver and kube-controller-manager (certificate
# watchers, 5-7 each), hold some, all counted against root. The kernel's
# default of 128 is reached with about six test hosts beside two control
# planes: the hosts' .path units then fail and systemd never reports
# running. Raised here, as the machine's setup, never lowered.
want_inotify=1024
have_inotify=$(cat /proc/sys/fs/inotify/max_user_instances)
if [ "$have_inotify" -lt "$want_inotify" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "ci-deps: fs.inotify.max_user_instances is $have_inotify; the e2e tests need $want_inotify (run as root, or: sysctl -w fs.inotify.max_user_instances=$want_inotify)" >&2
		exit 1
	fi
	echo "ci-deps: raising fs.inotify.max_user_instances from $have_inotify to $want_inotify (test hosts and control planes hold several each)"
	sysctl -qw fs.inotify.max_user_instances="$want_inotify"
fi

# nftables, iptables: reset's netfilter test (internal/network) makes the
# node's and others' tables and chains, nft and iptables-legacy, for real in a
# network namespace it creates.
# ignition: the real Ignition binary for the first-boot e2e test; it runs
# setfiles(8) from policycoreutils on what it writes (Debian builds it with
# SELinux relabeling).
pkgs=(debootstrap systemd-container shellcheck iproute2 openssl util-linux ignition policycoreutils nftables iptables)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ "${#missing[@]}" -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "ci-deps: missing packages ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "ci-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
