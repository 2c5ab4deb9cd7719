#!/usr/bin/env bash
# scripts/device_check.sh without a GPU, in ~15 s (ctest repo.device_check_dry_run, every build):
#  1. --dry-run --stop-after preflight: passes (exit 0) where every non-GPU piece is here, else
#     fails (exit 1) naming each missing piece on a MISSING line; either way summary.json is valid
#     JSON naming the stage, and the pre-flight took at most 15 s.
#  2. usage errors exit 2.
# Where the pre-flight passes (nvcc, cuDNN, CMake, ... present):
#  3. killed in the middle of configure, the run leaves a valid summary.json saying so, and no
#     process of the stage behind;
#  4. a budget of 0 s stops at configure with the line that says why.
# The full dry run (configure, build, the first GPU call) takes minutes: scripts/device_mimic_test.sh.
set -uo pipefail
repo=${1:?usage: device_check_test.sh REPO_ROOT}
tmp=$(mktemp -d /tmp/device_check_test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEVICE_CHECK_DEPS=$tmp/deps
fail() { echo "device_check_test: FAIL: $*"; exit 1; }
check_json() {  # file, python expression over s (the summary) that must hold
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" \
    || fail "$1 does not satisfy $2: $(cat "$1" 2> /dev/null)"
}

# 1. the pre-flight
OUT=$tmp/pre bash "$repo/scripts/device_check.sh" --dry-run --stop-after preflight > "$tmp/pre.log" 2>&1
rc=$?
cat "$tmp/pre.log"
check_json "$tmp/pre/summary.json" 's["stages"][0]["stage"] == "preflight" and s["dry_run"] is True'
check_json "$tmp/pre/summary.json" 's["stages"][0]["seconds"] <= 15'
if [ $rc -eq 0 ]; then
  check_json "$tmp/pre/summary.json" 's["result"].startswith("stopped after preflight")'
  preflight_ok=1
elif [ $rc -eq 1 ]; then
  grep -q "MISSING" "$tmp/pre.log" || fail "the pre-flight failed without naming a missing piece"
  check_json "$tmp/pre/summary.json" 's["result"] == "failed at preflight" and "missing" in s["stages"][0]["note"]'
  preflight_ok=0
else
  fail "the pre-flight exited $rc"
fi

# 2. usage
for bad in "--budget soon" "--stop-after lunch" "--frobnicate"; do
  # shellcheck disable=SC2086
  OUT=$tmp/usage bash "$repo/scripts/device_check.sh" $bad > /dev/null 2>&1
  [ $? -eq 2 ] || fail "'$bad' did not exit 2"
done

if [ "$preflight_ok" = 1 ]; then
  # 3. killed during configure: the summary says so, and the stage's processes are gone
  OUT=$tmp/kill bash "$repo/scripts/device_check.sh" --dry-run --stop-after configure --build-dir "$tmp/build" \
    > "$tmp/kill.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    grep -q '"stage": "configure", "status": "running"' "$tmp/kill/summary.json" 2> /dev/null && break
    sleep 0.1
  done
  check_json "$tmp/kill/summary.json" 's["stages"][-1] == {**s["stages"][-1], "stage": "configure", "status": "running"}'
  sleep 1
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  cat "$tmp/kill.log"
  [ $rc -eq 1 ] || fail "the killed run exited $rc, not 1"
  check_json "$tmp/kill/summary.json" 's["result"] == "interrupted in configure" and s["stages"][0]["status"] == "passed"'
  check_json "$tmp/kill/summary.json" 's["stages"][-1]["stage"] == "configure" and s["stages"][-1]["status"] == "interrupted"'
  sleep 1
  if pgrep -f -- "-B $tmp/build" > /dev/null; then fail "configure still runs after the script was killed"; fi

  # 4. no budget left for configure
  OUT=$tmp/budget bash "$repo/scripts/device_check.sh" --dry-run --budget 0 --build-dir "$tmp/build" > "$tmp/budget.log" 2>&1
  rc=$?
  cat "$tmp/budget.log"
  [ $rc -eq 1 ] || fail "a budget of 0 s exited $rc, not 1"
  grep -q "no time left in the budget for configure" "$tmp/budget.log" || fail "a budget of 0 s did not say why it stopped"
  check_json "$tmp/budget/summary.json" 's["result"] == "failed at configure"'
fi
echo "device_check_test: passed (pre-flight $([ "$preflight_ok" = 1 ] && echo passed || echo "failed, naming what is missing"))"
