#!/usr/bin/env bash
# The api tier: a lab driven through its controller's control API over TCP, as a swarm lab's
# managers drive it (`wanlab up --api`, `wanlab --api HOST:PORT ...`; docs/docker.md), on a
# namespace lab of this machine (no Docker).
#
#   tests/api/run.sh [--build-dir DIR]
#
# topologies/two-dc.json under a lab name of its own (api-<pid>), userspace backend, brought
# up with `--api 127.0.0.1:PORT --token-file FILE` (a free port, a random token); then, with
# `wanlab --api 127.0.0.1:PORT --api-dir DIR --api-token-file FILE`: status (text and JSON);
# a wrong token refused (401, exit 1), none (exit 2), another lab's name (exit 1), `up` with
# --api (exit 2), `up --api` without a token (exit 2); `link set use euw --delay +25 ms` and
# ping use-0 -> euw-0 (min no earlier than the new RTT - 0.05 ms, mean within max(2 ms, 5 %)
# above, judged as the docker tier judges it), the delay set back; `replay --stop`; `run` of
# two-dc-1b cut to 2 iterations, its summary printed from the API's answer and its run
# folder written by the controller; `wanlab down`. Not root: "SKIPPED: <reason>", exit 77.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "api: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
tier=api
# shellcheck source=../support/docker_tier.sh
source "$repo/tests/support/docker_tier.sh"

[[ $(id -u) -eq 0 ]] || skip "the api tier needs root (to bring a namespace lab up)"
command -v jq >/dev/null || skip "no jq here (scripts/setup.sh installs it)"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || fail "no build folder $build_dir"
W=$build_dir/controller/wanlab
[[ -x $W && -x $build_dir/agents/wanlab-agent ]] || fail "wanlab and wanlab-agent are not built in $build_dir"

lab=api-$$
work=$(mktemp -d /tmp/wanlab-api-tier.XXXXXX)
up=0
cleanup() {
  local rc=$?
  ((up)) && "$W" down "$lab" >/dev/null 2>&1
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
mkdir -p "$work/topologies" "$work/bench/scenarios"
jq --arg n "$lab" '.name = $n' "$repo/topologies/two-dc.json" >"$work/topologies/two-dc.json"
jq '.iterations = 2 | .warmup = 1' "$repo/bench/scenarios/two-dc-1b.json" >"$work/bench/scenarios/two-dc-1b.json"
token=$work/token
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token")
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$work"
expect_rc() {  # expect_rc RC WHAT CMD...: CMD must exit RC
  local want=$1 what=$2 rc=0
  shift 2
  "$@" >"$work/out.txt" 2>&1 || rc=$?
  ((rc == want)) || { cat "$work/out.txt"; fail "$what: exit $rc, expected $want"; }
}

expect_rc 2 "up --api without a token" env -u WANLAB_TOKEN "$W" up topologies/two-dc.json --api "127.0.0.1:$port"
up=1
"$W" up topologies/two-dc.json --backend userspace --api "127.0.0.1:$port" --token-file "$token" >"$work/up.txt" 2>&1 ||
  { cat "$work/up.txt"; fail "wanlab up --api failed"; }
step_done "lab $lab up, control API on 127.0.0.1:$port"

a() { env -u WANLAB_TOKEN "$W" --api "127.0.0.1:$port" --api-dir "$work" --api-token-file "$token" "$@"; }
status_json=$work/status.json
a status --json >"$status_json" || fail "wanlab --api status --json failed"
[[ $(jq -r .lab "$status_json") == "$lab" ]] || fail "wanlab --api status: not lab $lab"
a status | grep -q "^lab $lab " || fail "wanlab --api status: no 'lab $lab' line"
expect_rc 1 "a wrong token" env WANLAB_TOKEN=not-it "$W" --api "127.0.0.1:$port" status
grep -q "refused the token (401)" "$work/out.txt" || { cat "$work/out.txt"; fail "a wrong token: no 401"; }
expect_rc 2 "no token" env -u WANLAB_TOKEN "$W" --api "127.0.0.1:$port" status
expect_rc 1 "another lab's name" a status other-lab
expect_rc 2 "up with --api" a up topologies/two-dc.json
step_done "status through the API; wrong, missing token and wrong lab refused"

old=$(jq -r '.links[] | select(.src == "use" and .dst == "euw") | .delay' "$status_json")
back=$(jq -r '.links[] | select(.src == "euw" and .dst == "use") | .delay' "$status_json")
new_ms=$(awk -v d="$(ms_of "$old")" 'BEGIN { printf "%.3f", d + 25 }')
a link set use euw --delay "${new_ms}ms" >/dev/null || fail "wanlab --api link set failed"
node_exec() { "$W" exec --lab "$lab" "$1" -- "${@:2}"; }
on_quiet_host "RTT after link set through the API" check_rtt_after_link_set use euw "$new_ms" "$back"
a link set use euw --delay "$old" >/dev/null || fail "wanlab --api link set (back) failed"
a replay --stop | grep -q "no replay was running in lab $lab" || fail "wanlab --api replay --stop: unexpected answer"
step_done "link set through the API moved the RTT: $judged; replay --stop answered"

a run bench/scenarios/two-dc-1b.json --out out --quiet >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "wanlab --api run failed"; }
grep -q "iteration time  mean" "$work/run.txt" || { cat "$work/run.txt"; fail "wanlab --api run printed no summary"; }
want=$(jq .iterations "$work/bench/scenarios/two-dc-1b.json")
[[ $(jq '.iteration_time_s.per_iteration // [] | length' "$work/out/summary.json") == "$want" ]] ||
  fail "the controller's run folder has no summary with $want iteration times"
measured "run through the API: $(grep 'iteration time' "$work/run.txt" | sed 's/^ *//')"
step_done "run through the API, summary from its answer"
"$W" down "$lab" >/dev/null && up=0
echo "api: whole tier $(elapsed) s"
