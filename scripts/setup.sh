#!/usr/bin/env bash
# Installs everything wanlab needs on a fresh Debian 12 machine. Idempotent: packages
# already present are skipped, so a second run does nothing and returns quickly.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config ninja-build
  libnl-3-dev libnl-route-3-dev
  libboost-dev libboost-system-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev catch2 libbenchmark-dev
  libyaml-cpp-dev  # workload cards (card.yaml)
  # the real tools the lab and its tests use
  iproute2 iperf3 iputils-ping tcpdump jq
  # the fuzz tier (libFuzzer is clang's)
  clang libclang-rt-dev
  # plots of `wanlab bench`
  gnuplot-nox
  # the comparison benchmark (Mininet with Linux bridges)
  mininet bridge-utils
)

# Optional: a tier that needs one skips visibly without it, so a failed install is a note,
# not an error.
optional=(
  # the pytorch tier (a real framework through `wanlab launch`; tests/pytorch/run.sh)
  python3-torch
  # /metrics checked with promtool; compose --monitoring's Prometheus image (docs/metrics.md)
  prometheus
  # the dashboard's test in headless Chromium
  chromium
  # the ns-3 reference executor (`wanlab bench --mode ns3`, ctest tier ns3); without it the
  # build leaves the executor out and the tier says SKIPPED with why
  libns3-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

optional_missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done

if ((${#missing[@]} == 0 && ${#optional_missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  sudo=sudo
else
  sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq || { ((${#missing[@]} == 0)) && echo "setup: note: apt-get update failed"; }
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for p in "${optional_missing[@]}"; do
  echo "setup: installing optional $p"
  $sudo apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
    echo "setup: note: optional $p could not be installed; the tiers that need it will be skipped"
done
echo "setup: done"
