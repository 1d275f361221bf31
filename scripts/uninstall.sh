#!/usr/bin/env bash
# Removes what install.sh and aks-flex-node installed, and exactly that: it
# stops the agent, resets the node, then deletes the paths listed in the
# install record. Without a record it asks the binary for the layout the
# config declares instead of assuming /usr/local.
set -euo pipefail

readonly NAME=aks-flex-node
readonly STATE_DIR=/var/lib/aks-flex-node
readonly RECORD="$STATE_DIR/install-record"
readonly DEFAULT_CONFIG=/etc/aks-flex-node/config.json
readonly UNITS=(aks-flex-node-agent.service aks-flex-node-recovery.timer aks-flex-node-recovery.service aks-flex-node-firstboot.service)
# Written by Ignition from "aks-flex-node ignition render", not by install.sh:
# after reset removes the joined marker its condition holds again, so left
# behind it would try to join on every boot.
readonly FIRSTBOOT_UNIT=/etc/systemd/system/aks-flex-node-firstboot.service

usage() {
	cat <<EOF
Usage: uninstall.sh [--config PATH] [--force]
  --config PATH   config whose layout to remove (default $DEFAULT_CONFIG)
  --force         continue past errors
EOF
}

config="$DEFAULT_CONFIG"
force=false
while [ $# -gt 0 ]; do
	case "$1" in
	--config) config="${2:?--config needs a path}"; shift 2 ;;
	--force) force=true; shift ;;
	-h | --help) usage; exit 0 ;;
	*)
		usage >&2
		echo "uninstall.sh: unknown argument: $1" >&2
		exit 1
		;;
	esac
done
if [ "$(id -u)" -ne 0 ]; then
	echo "uninstall.sh: must run as root" >&2
	exit 1
fi

removed=()
failed=()
fail() {
	echo "uninstall.sh: $*" >&2
	failed+=("$*")
	if ! $force; then
		echo "uninstall.sh: stopping; --force continues past errors" >&2
		exit 1
	fi
}

# Read the record once, before anything is removed.
files=()
dirs=()
if [ -f "$RECORD" ]; then
	while read -r kind p; do
		case "$kind" in
		file) files+=("$p") ;;
		dir) dirs+=("$p") ;;
		esac
	done <"$RECORD"
fi

# Find the binary: the recorded one, else the config's layout, else the
# default layout.
bin=""
for f in "${files[@]}"; do
	case "$f" in */"$NAME") bin="$f" ;; esac
done
if [ -z "$bin" ]; then
	for candidate in /usr/local/bin/"$NAME" /opt/"$NAME"/bin/"$NAME"; do
		if [ -x "$candidate" ]; then
			bin="$candidate"
			break
		fi
	done
	if [ -n "$bin" ] && [ -f "$config" ]; then
		if dir=$("$bin" layout --config "$config" --get binDir); then
			bin="$dir/$NAME"
		fi
	fi
	if [ -n "$bin" ]; then
		files+=("$bin")
	fi
fi
if [ -n "$bin" ] && [ ! -x "$bin" ]; then
	bin=""
fi

# The upgrade slots, their links and the recovery script live in the
# layout's lib dir; ask the binary where, before anything is removed (the
# binary on PATH is a link into those slots).
slot_paths=()
lib_dir=""
if [ -n "$bin" ]; then
	layout_args=()
	if [ -f "$config" ]; then layout_args=(--config "$config"); fi
	if lib_dir=$("$bin" layout "${layout_args[@]}" --get libDir); then
		for key in upgradeSlots.current upgradeSlots.lastGood upgradeSlots.blue upgradeSlots.green recoveryScript; do
			if p=$("$bin" layout "${layout_args[@]}" --get "$key"); then
				slot_paths+=("$p")
			else
				fail "could not ask $bin for $key"
			fi
		done
	else
		lib_dir=""
		fail "could not ask $bin for the layout's lib dir"
	fi
fi

# Stop the agent first so nothing restarts what we remove.
if [ -n "$bin" ] && "$bin" reset --help >/dev/null 2>&1; then
	"$bin" reset --config "$config" || fail "$bin reset failed"
fi
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
	for unit in "${UNITS[@]}"; do
		if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit"; then
			systemctl disable --now "$unit" >/dev/null 2>&1 || fail "could not stop $unit"
		fi
	done
fi
if [ -n "$bin" ]; then
	"$bin" uninstall-service --config "$config" >/dev/null 2>&1 || fail "$bin uninstall-service failed"
fi

if [ -f "$FIRSTBOOT_UNIT" ]; then
	if rm -f "$FIRSTBOOT_UNIT"; then
		removed+=("$FIRSTBOOT_UNIT")
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
			systemctl daemon-reload || fail "systemctl daemon-reload failed"
		fi
	else
		fail "could not remove $FIRSTBOOT_UNIT"
	fi
fi

# Check existence first: on a read-only /usr, removing a missing path fails
# with EROFS, not ENOENT.
for p in "${files[@]}"; do
	if [ -e "$p" ] || [ -L "$p" ]; then
		if rm -f "$p"; then removed+=("$p"); else fail "could not remove $p"; fi
	fi
done
for p in "${slot_paths[@]+"${slot_paths[@]}"}"; do
	if [ -e "$p" ] || [ -L "$p" ]; then
		if rm -f "$p"; then removed+=("$p"); else fail "could not remove $p"; fi
	fi
done
# Temp files a killed upgrade may have left next to the slots: every
# dotfile there (.candidate-*, link temps .<name>.tmp-*, and the atomic
# writers' .<name><digits>).
if [ -n "$lib_dir" ] && [ -d "$lib_dir" ]; then
	for p in "$lib_dir"/.[!.]*; do
		if [ -e "$p" ] || [ -L "$p" ]; then
			if rm -f "$p"; then removed+=("$p"); else fail "could not remove $p"; fi
		fi
	done
	if [ -z "$(ls -A "$lib_dir")" ]; then
		if rmdir "$lib_dir"; then removed+=("$lib_dir/"); else fail "could not remove $lib_dir"; fi
	else
		echo "uninstall.sh: keeping $lib_dir: it holds files aks-flex-node did not create"
	fi
fi
if [ -f "$RECORD" ]; then
	if rm -f "$RECORD"; then removed+=("$RECORD"); else fail "could not remove $RECORD"; fi
fi
# Directories deepest first, and only when empty: anything left in them
# is not ours to delete.
mapfile -t sorted < <(printf '%s\n' "${dirs[@]+"${dirs[@]}"}" | awk 'NF' | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-)
for d in "${sorted[@]+"${sorted[@]}"}"; do
	[ -d "$d" ] || continue
	if [ -n "$(ls -A "$d")" ]; then
		echo "uninstall.sh: keeping $d: it holds files this installer did not create"
	elif rmdir "$d"; then
		removed+=("$d/")
	else
		fail "could not remove $d"
	fi
done

echo "uninstall.sh: removed ${#removed[@]} path(s)"
for p in "${removed[@]+"${removed[@]}"}"; do echo "  $p"; done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "uninstall.sh: ${#failed[@]} error(s):" >&2
	for f in "${failed[@]}"; do echo "  $f" >&2; done
	exit 1
fi
