#!/usr/bin/env bash
# Run `make test` as CI runs it on a new machine, RUNS times in a row (default 1): each run in a
# clean clone of HEAD with CI=true and cold caches (a fresh HOME, so no pip or npm cache and no
# firebase-tools configuration; a clone has no __pycache__, node_modules or venv). Prints each
# run's result and time; the logs stay under the printed folder. Exits 1 if any run failed.
set -uo pipefail
runs=${1:-1}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/fresh-clone-test.XXXXXX)
echo "fresh-clone runs of $(git -C "$top" rev-parse --short HEAD) in $work"
failed=0
for n in $(seq 1 "$runs"); do
  run="$work/run-$n"
  mkdir -p "$run/home"
  git clone -q "$top" "$run/repo"
  started=$(date +%s)
  (cd "$run/repo" && env HOME="$run/home" CI=true bash .ci/run) > "$run/log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - started ))
  summary=$(grep -E "^[0-9]+ (passed|failed)|[0-9]+ (passed|failed)" "$run/log" | tail -n 1)
  echo "run $n: exit $status after ${seconds} s; last summary: ${summary:-none} (log: $run/log)"
  [ "$status" -eq 0 ] || failed=1
  # The clone's stack is stopped by then; its venvs and node_modules are 1 GB: keep the logs only
  # (the stack's own under emulators/).
  cp -r "$run/repo/.emulators" "$run/emulators" 2>/dev/null && rm -rf "$run/emulators/runtime-venv"
  rm -rf "$run/repo" "$run/home"
done
exit $failed
