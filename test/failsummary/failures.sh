#!/usr/bin/env bash
# failures.sh LOG...: a short summary of what failed in go test output,
# for the end of `make test`. A CI system that keeps only the last lines
# of a run (ours does) otherwise shows the failed test's cleanup (host
# journals, console logs), not which test failed or why.
#
# For each failed test with no failed subtest (the one that says why),
# its name, time and the last lines it logged at its own level that read
# like a failure (want, error, timed out, ...), or its last lines if none
# do; the test hosts' and control plane's diagnostics, which every
# failure logs, are left out. Then the failed packages, panics and
# timeouts. Reads every LOG in turn; prints nothing
# when nothing failed.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 LOG..." >&2
	exit 2
fi

awk -v keep=3 -v width=240 -v most=10 '
function indent(s) { match(s, /^ */); return RLENGTH }
function fits(s, tier) {
	if (tier == 1) return s ~ /want|timed out|unexpected|panic|expected|never/
	if (tier == 2) return s ~ /fail|error|not |refused|denied|is left|missing|got /
	return 1
}
function cut(s) { sub(/^ +/, "", s); return length(s) > width ? substr(s, 1, width) "..." : s }
# close the innermost open test blocks that end before a line at indent i
function close_to(i) {
	while (depth > 0 && ind[depth] >= i) {
		if (!nested[depth]) {
			leaves++
			if (leaves <= most) {
				summary = summary name[depth] "\n"
				# up to keep lines, in order: those that say what was
				# wanted first, then those that name a failure, then the last
				for (k = 1; k <= n[depth]; k++) chosen[k] = 0
				m = 0
				for (tier = 1; tier <= 3 && m < keep; tier++)
					for (k = n[depth]; k >= 1 && m < keep; k--)
						if (!chosen[k] && fits(tolower(line[depth, k]), tier)) { chosen[k] = 1; m++ }
				for (k = 1; k <= n[depth]; k++)
					if (chosen[k]) summary = summary "      " cut(line[depth, k]) "\n"
			}
		}
		depth--
	}
}
FNR == 1 { close_to(0) }
/^ *--- FAIL: / {
	i = indent($0)
	close_to(i)
	if (depth > 0) nested[depth] = 1
	depth++; ind[depth] = i; nested[depth] = 0; n[depth] = 0
	s = $0; sub(/^ *--- FAIL: /, "", s); name[depth] = "  " s
	next
}
{
	i = indent($0)
	if (depth > 0 && i <= ind[depth] && $0 != "") close_to(i)
	# a line the test logged itself (file.go:N: ...), not a continuation
	# (the test harness diagnostics, logged at every failure, left out)
	if (depth > 0 && i == ind[depth] + 4 && $0 ~ /^ *[A-Za-z0-9_.-]+\.go:[0-9]+: / && $0 !~ /^ *(boot|diagnostics|netsnap|controlplane)\.go:/) {
		n[depth]++; line[depth, n[depth]] = $0
	}
}
/^FAIL\t/ || /^panic: / || /^\*\*\* Test killed/ { tail = tail "  " $0 "\n" }
END {
	close_to(0)
	if (summary == "" && tail == "") exit
	print "failed:"
	printf "%s", summary
	if (leaves > most) printf "  ... and %d more failed tests\n", leaves - most
	printf "%s", tail
}
' "$@"
