# Shell helpers sourced by scripts/*: run a command quietly, yet show everything it printed when it fails.
#
#   quiet WHAT CMD [ARGS...]
#
# runs CMD with stdout and stderr captured in a temporary log: nothing is
# printed when it succeeds; when it fails, "WHAT failed (exit N): CMD ARGS"
# and the whole log go to stderr and quiet returns CMD's exit status (so a
# script under set -e stops there, with the reason on the screen).
quiet() {
    _q_what=$1
    shift
    _q_log=$(mktemp "${TMPDIR:-/tmp}/gguffs-log.XXXXXX")
    if "$@" >"$_q_log" 2>&1; then
        rm -f "$_q_log"
        return 0
    else
        _q_rc=$?
    fi
    {
        echo "$_q_what failed (exit $_q_rc): $*"
        echo "---- its output:"
        cat "$_q_log"
        echo "----"
    } >&2
    rm -f "$_q_log"
    return "$_q_rc"
}

# no_skips DIR: fails (exit status 1, the skipped tests named) when the
# last `meson test -C DIR` skipped any test: a run that skipped something
# has not passed, CI or not (a missing prerequisite is installed by
# scripts/setup --tests).
no_skips() {
    /usr/bin/python3 - "$1/meson-logs/testlog.json" <<'PYEOF'
import json, sys
skipped = []
with open(sys.argv[1]) as f:
    for line in f:
        t = json.loads(line)
        if t.get("result") == "SKIP":
            skipped.append(t.get("name"))
if skipped:
    print("test: %d test(s) skipped, so the suite has not passed: %s" % (len(skipped), ", ".join(skipped)),
          file=sys.stderr)
    sys.exit(1)
PYEOF
}
