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

# Optional: the ns-3 reference executor (`wanlab bench --mode ns3`, ctest tier ns3). Where apt
# cannot install them the build leaves the executor out and the tier says SKIPPED with why.
optional=(libns3-dev)

optional_missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done
if ((${#optional_missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then opt_sudo=sudo; else opt_sudo=; fi
  echo "setup: installing optional ${optional_missing[*]}"
  if ! { $opt_sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $opt_sudo apt-get install -y -qq \
           --no-install-recommends "${optional_missing[@]}" >/dev/null; }; then
    echo "setup: WARNING: could not install ${optional_missing[*]}: the ns-3 reference executor is left out of the build"
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  sudo=sudo
else
  sudo=
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
