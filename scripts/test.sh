#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test tier this machine
# can run. Tiers that cannot run here are reported as skipped, with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
set +e
ctest --output-on-failure --timeout 1200
rc=$?
set -e
echo
# Each skipped tier says why in its own output; show those lines here.
if [[ -f Testing/Temporary/LastTest.log ]]; then
  grep -h "^SKIPPED:" Testing/Temporary/LastTest.log | sort -u | sed 's/^/skip reason: /' || true
fi
echo
echo "Tiers (docs/testing.md):"
echo "  unit   ran (ctest test 'unit')"
if [[ $(id -u) -eq 0 ]]; then
  echo "  netns  ran as root (ctest test 'netns': namespaces, qdiscs, ping and iperf3 through two-DC labs)"
else
  echo "  netns  SKIPPED: needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
fi
echo "  kernel runs where the kernel has netem (ctest test 'kernel'); SKIPPED with the reason elsewhere"
echo "  vm     the kernel tier inside a qemu guest on Debian's stock kernel (ctest test 'vm'); SKIPPED with the reason where qemu or the kernel package cannot be installed"
echo "  fuzz   libFuzzer harnesses of the parsers, the API handler and the protocol, 3 s each (ctest test 'fuzz'); SKIPPED with the reason where clang's libFuzzer is missing"
echo "  ns3    the ns-3 packet-level reference executor against size/rate and the simulator (ctest test 'ns3'); SKIPPED where ns-3 (libns3-dev) is missing"
echo "  pytorch a real PyTorch gloo job through wanlab launch across two DCs (ctest test 'pytorch'); SKIPPED without root or python3-torch"
echo "  docker the docker-compose lab: image build, ping and iperf3 inside the containers, Prometheus and the dashboard, a short scenario, teardown (ctest test 'docker'); SKIPPED with the reason where Docker cannot run"
echo "  swarm  the same lab as a Docker Swarm stack on a single-node swarm (ctest test 'swarm'); SKIPPED with the reason where Docker or a swarm cannot run"
echo "  api    a namespace lab driven through its control API over TCP (wanlab up --api; ctest test 'api'); SKIPPED without root"
# A long CI log keeps its head and its tail: the failures once more, here at the end.
failed=Testing/Temporary/LastTestsFailed.log
if [[ $rc -ne 0 && -f $failed && -f Testing/Temporary/LastTest.log ]]; then
  echo
  echo "Failed tiers: their failure lines (whole output: build/Testing/Temporary/LastTest.log)"
  while IFS=: read -r _ name; do
    echo "== $name"
    awk -v t="$name" '
      $0 ~ "^[0-9]+/[0-9]+ Testing: " t "$" { p = 1; next }
      p && /^<end of output>/ { p = 0 }
      p && /^(Command|Directory): / { next }
      p && (/FAILED:/ || /^vm: / || /^(docker|swarm|api|pytorch|fuzz): / || /[Ee]rror/) { print; n = 6; next }
      p && n > 0 { print; n-- }' Testing/Temporary/LastTest.log | grep -v 'dbus' | head -60 || true
  done <"$failed"
fi
exit $rc
