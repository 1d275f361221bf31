#!/bin/bash
# Written by aks-flex-node; changes are overwritten.
# aks-flex-node recovery, with the host's layout filled in.
#
# It puts the agent back on its last-good slot when an upgrade fails: the new
# agent crashed or exited non-zero (the agent unit's ExecStopPost= runs this
# with "agent-stopped", and its OnFailure= starts the recovery unit), or did
# not confirm itself healthy before the deadline (the recovery timer runs
# this every few seconds while an upgrade is in flight, and once at boot).
# It needs nothing but bash, coreutils, flock (util-linux, like the nsenter
# and mount the agent already requires) and systemctl: /usr may be read-only
# and have no package manager, and the agent binary may be what is broken.
set -euo pipefail

readonly LIB_DIR=/usr/local/lib/aks-flex-node
readonly STATE_DIR=/var/lib/aks-flex-node
readonly CURRENT=/usr/local/lib/aks-flex-node/current
readonly LAST_GOOD=/usr/local/lib/aks-flex-node/last-good
readonly AGENT_UNIT=aks-flex-node-agent.service
readonly RECOVERY_UNIT=aks-flex-node-recovery.service
readonly TIMER_UNIT=aks-flex-node-recovery.timer
readonly IN_FLIGHT="$STATE_DIR/upgrade-in-flight"
readonly RESULT="$STATE_DIR/upgrade-result"
readonly FAILED="$STATE_DIR/upgrade-agent-failed"
readonly LINKS_LOCK="$STATE_DIR/upgrade-links.lock"
readonly BOOT_ID_FILE=/proc/sys/kernel/random/boot_id

log() { echo "aks-flex-node-recovery: $*" >&2; }

# read_kv FILE KEY prints KEY's value from a key=value record, and nothing
# when FILE is gone (a confirmation may remove the record at any time).
read_kv() {
	local k v data
	data=$(cat "$1" 2>/dev/null) || return 0
	while IFS='=' read -r k v; do
		if [ "$k" = "$2" ]; then
			printf '%s' "$v"
			return 0
		fi
	done <<<"$data"
}

# lock_links takes the lock agent-upgrade, the confirming agent and seeding
# take around every change of the links and records, so a confirmation and
# a rollback at the deadline never interleave. Every holder keeps it for a
# few renames; if it is still held after 30s something hangs, and a
# rollback without the lock beats an agent stranded on a broken slot.
lock_links() {
	exec 9>>"$LINKS_LOCK"
	if ! flock -w 30 9; then
		log "$LINKS_LOCK still held after 30s; going on without it"
	fi
}

# unlock_links releases it before the agent is restarted: stopping the old
# agent may wait for an agent that waits for this lock.
unlock_links() {
	exec 9>&-
}

# new_agent_process succeeds when the agent process systemd started last
# began after current was switched, in this boot: that process ran the new
# slot. The old agent, stopped by agent-upgrade's restart, may fail its
# stop (a timeout, a non-zero exit); that says nothing about the new one.
# A record without the switch clock counts every process as new.
new_agent_process() {
	local sw boot started
	sw=$(read_kv "$IN_FLIGHT" switch_mono)
	boot=$(read_kv "$IN_FLIGHT" boot_id)
	case "$sw" in
	'' | 0 | *[!0-9]*) return 0 ;;
	esac
	if [ "$boot" != "$(cat "$BOOT_ID_FILE" 2>/dev/null)" ]; then
		return 0 # rebooted since the switch: every process ran after it
	fi
	started=$(systemctl show -p ExecMainStartTimestampMonotonic --value "$AGENT_UNIT" 2>/dev/null) || return 0
	case "$started" in
	'' | *[!0-9]*) return 0 ;;
	esac
	[ "$started" -gt "$sw" ]
}

# slot_of LINK prints the slot LINK names when that slot is an executable
# file, and nothing otherwise.
slot_of() {
	local t
	t=$(readlink "$1" 2>/dev/null) || return 0
	case "$t" in
	agent-blue | agent-green) ;;
	*) return 0 ;;
	esac
	if [ -f "$LIB_DIR/$t" ] && [ -x "$LIB_DIR/$t" ]; then
		printf '%s' "$t"
	fi
}

# point LINK SLOT renames a new symlink over LINK: readers see the old link
# or the new one, never none.
point() {
	local tmp
	tmp="$(dirname "$1")/.$(basename "$1").tmp-$$"
	rm -f "$tmp"
	ln -s "$2" "$tmp"
	mv -fT "$tmp" "$1"
	sync "$LIB_DIR" 2>/dev/null || true
}

# write_atomic FILE writes stdin to FILE through a temp file and a rename.
write_atomic() {
	local tmp="$1.tmp-$$"
	cat >"$tmp"
	sync "$tmp" 2>/dev/null || true
	mv -f "$tmp" "$1"
	sync "$STATE_DIR" 2>/dev/null || true
}

write_result() {
	write_atomic "$RESULT" <<REC
result=$1
reason=$2
from_slot=$from_slot
from_version=$from_version
to_slot=$to_slot
to_version=$to_version
time=$(date -u +%Y-%m-%dT%H:%M:%SZ)
by=recovery
REC
	log "result=$1 reason=$2 from=$from_version ($from_slot) to=$to_version ($to_slot)"
}

stop_timer() {
	systemctl stop --no-block "$TIMER_UNIT" 2>/dev/null || true
	# An upgrade may have started between our look and the stop: it
	# started the timer before we stopped it, so start it again.
	if [ -f "$IN_FLIGHT" ]; then
		systemctl start --no-block "$TIMER_UNIT" 2>/dev/null || true
	fi
}

restart_agent() {
	systemctl reset-failed "$AGENT_UNIT" 2>/dev/null || true
	systemctl restart "$AGENT_UNIT"
}

mode="${1:-recover}"
case "$mode" in
agent-stopped)
	# ExecStopPost= of the agent unit: systemd sets SERVICE_RESULT,
	# EXIT_CODE and EXIT_STATUS. Only a failure during an upgrade is ours;
	# otherwise the unit's own Restart= handles it.
	[ -f "$IN_FLIGHT" ] || exit 0
	result="${SERVICE_RESULT:-unknown}"
	[ "$result" != success ] || exit 0
	if ! new_agent_process; then
		log "the agent that stopped (result $result) started before the upgrade switched current: not the new agent's failure"
		exit 0
	fi
	write_atomic "$FAILED" <<REC
reason=agent stopped with result $result (${EXIT_CODE:-?} ${EXIT_STATUS:-?})
REC
	log "agent failed during an upgrade (result $result, ${EXIT_CODE:-?} ${EXIT_STATUS:-?}); starting $RECOVERY_UNIT"
	systemctl start --no-block "$RECOVERY_UNIT"
	exit 0
	;;
recover) ;;
*)
	log "unknown mode $mode (want recover or agent-stopped)"
	exit 2
	;;
esac

lock_links
cur=$(slot_of "$CURRENT")
good=$(slot_of "$LAST_GOOD")

if [ ! -f "$IN_FLIGHT" ]; then
	# Nothing in flight: only repair links a crash left behind so both
	# name an executable slot. last-good only ever moves to a slot an
	# agent confirmed, so current goes back to it, never the other way:
	# a crash-looping agent may well look "not failed" (it sits in
	# auto-restart), and an unconfirmed binary must not become last-good.
	restart=""
	if [ -z "$good" ] && [ -n "$cur" ]; then
		point "$LAST_GOOD" "$cur"
		log "last-good was broken; pointed it at current ($cur), the only executable slot"
	elif [ -z "$cur" ] && [ -n "$good" ]; then
		point "$CURRENT" "$good"
		log "current was broken; pointed it at last-good ($good)"
		restart=1
	elif [ -z "$cur" ]; then
		log "neither current nor last-good names an executable slot in $LIB_DIR; reinstall the agent"
		exit 1
	elif [ "$cur" != "$good" ]; then
		point "$CURRENT" "$good"
		log "current ($cur) and last-good ($good) differed with nothing in flight: nothing confirmed $cur; pointed current back at last-good"
		restart=1
	fi
	unlock_links
	if [ -n "$restart" ]; then
		restart_agent
	elif systemctl is-failed --quiet "$AGENT_UNIT"; then
		log "$AGENT_UNIT failed with no upgrade in flight; current is last-good ($good), nothing to roll back"
	fi
	stop_timer
	exit 0
fi

from_slot=$(read_kv "$IN_FLIGHT" from_slot)
from_version=$(read_kv "$IN_FLIGHT" from_version)
to_slot=$(read_kv "$IN_FLIGHT" to_slot)
to_version=$(read_kv "$IN_FLIGHT" to_version)
deadline=$(read_kv "$IN_FLIGHT" deadline)
case "$deadline" in
'' | *[!0-9]*) deadline=0 ;;
esac
now=$(date +%s)

reason=""
if [ -f "$FAILED" ]; then
	reason=$(read_kv "$FAILED" reason)
elif systemctl is-failed --quiet "$AGENT_UNIT" && new_agent_process; then
	reason="$AGENT_UNIT failed"
elif [ "$now" -ge "$deadline" ]; then
	reason="the new agent did not confirm within the deadline ($(date -u -d "@$deadline" +%Y-%m-%dT%H:%M:%SZ))"
fi
if [ -z "$reason" ]; then
	exit 0 # still within the deadline; the timer runs this again
fi

if [ -n "$to_slot" ] && [ "$cur" = "$to_slot" ] && [ "$good" = "$to_slot" ]; then
	# The agent confirmed (last-good moved) but died before it cleared the
	# record: the upgrade stands.
	write_result upgraded "confirmed by the new agent; completed by recovery after: $reason"
elif [ "$good" = "$cur" ] && [ -n "$cur" ]; then
	# current was never switched (agent-upgrade stopped before the switch).
	write_result aborted "the upgrade never switched current: $reason"
else
	if [ -z "$good" ]; then
		log "last-good does not name an executable slot in $LIB_DIR; cannot roll back"
		exit 1
	fi
	point "$CURRENT" "$good"
	write_result rolled-back "$reason"
fi
rm -f "$FAILED" "$IN_FLIGHT"
sync "$STATE_DIR" 2>/dev/null || true
unlock_links
if [ "$cur" = "$good" ] && [ -n "$cur" ] && systemctl is-active --quiet "$AGENT_UNIT"; then
	: # the agent already runs the slot both links name
else
	restart_agent
fi
stop_timer
