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
  # the real tools the lab and its tests use
  iproute2 iperf3 iputils-ping tcpdump jq
  # the fuzz tier (libFuzzer is clang's)
  clang libclang-rt-dev
  # plots of `wanlab bench`
  gnuplot-nox
  # the comparison benchmark (Mininet with Linux bridges)
  mininet bridge-utils
)

# Optional: tiers that need them skip, saying so, where they cannot be installed.
optional=(
  # /metrics checked with promtool; compose --monitoring's Prometheus image (docs/metrics.md)
  prometheus
  # the dashboard: its JS built with npm, its test in headless Chromium
  npm chromium
)
optional_missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done
install_optional() {
  ((${#optional_missing[@]} == 0)) && return 0
  echo "setup: installing optional ${optional_missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" >/dev/null ||
    echo "setup: warning: could not install ${optional_missing[*]}; the tests that need them are SKIPPED"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ $(id -u) -ne 0 ]]; then
  sudo=sudo
else
  sudo=
fi
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  if ((${#optional_missing[@]} > 0)); then
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq || true
    install_optional
  fi
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_optional
echo "setup: done"
