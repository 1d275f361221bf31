#!/usr/bin/env bash
# Installs the Debian packages the tests need. Idempotent; installs nothing
# when everything is present, so a warm machine pays no apt round trip.
set -euo pipefail

# ignition: the real Ignition binary for the first-boot e2e test; it runs
# setfiles(8) from policycoreutils on what it writes (Debian builds it with
# SELinux relabeling).
pkgs=(debootstrap systemd-container shellcheck iproute2 openssl util-linux ignition policycoreutils)
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
