#!/usr/bin/env bash
# The vm tier: boots Debian's stock kernel (linux-image-amd64) under qemu with software
# emulation (TCG; no KVM needed) from an initramfs built here out of this build's binaries,
# and runs the kernel test tier (tests/kernel: HTB + netem with real delay, jitter and loss)
# inside. Prints the guest's console, keeps it and the JUnit report under the build dir,
# and exits with the guest's test status.
#
#   tests/vm/run.sh [--build-dir DIR] [--timeout SECONDS] [--realtime] [-- CATCH2 ARGS...]
#
# --build-dir  the CMake build folder holding controller/wanlab and tests/wanlab_kernel_tests
#              (default: build/ in the repository)
# --timeout    wall-clock limit of the guest (default 600 s)
# --realtime   guest clock on the host's real time (plain TCG, 2 vCPUs) instead of the
#              default deterministic instruction-counted clock (-icount; see README.md)
# after --     arguments for wanlab_kernel_tests, e.g. a test name or "[kernel]"
#
# Installs qemu-system-x86, linux-image-amd64 and busybox-static with apt-get when they are
# missing. Where they cannot be installed (not root, no apt, no network) it prints
# "SKIPPED: <reason>" and exits 77, which ctest reports as skipped. Once the guest has
# booted, the exit status is the tests' (never 77). See tests/vm/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build
timeout_s=600
realtime=0
test_args=()
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    --realtime) realtime=1; shift ;;
    --) shift; test_args=("$@"); break ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vm: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "vm: $*" >&2; exit 1; }

[[ $(uname -m) == x86_64 ]] || skip "the vm tier boots Debian's amd64 kernel; this machine is $(uname -m)"

# ---- what the guest needs ----

build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || fail "no build folder $build_dir"
wanlab_bin=$build_dir/controller/wanlab
tests_bin=$build_dir/tests/wanlab_kernel_tests
[[ -x $wanlab_bin ]] || fail "$wanlab_bin is not built (build first: scripts/build.sh)"
[[ -x $tests_bin ]] || skip "$tests_bin is not built (no tests/kernel sources in this build, e.g. WANLAB_TEST_GLOB)"

# Debian's stock kernel: the newest /boot/vmlinuz-* whose modules include sch_netem.
find_kernel() {
  local v
  for k in $(ls /boot/vmlinuz-* 2>/dev/null | sort -rV); do
    v=${k#/boot/vmlinuz-}
    if [[ -r $k && -r /lib/modules/$v/modules.dep ]] && grep -q '/sch_netem\.ko' "/lib/modules/$v/modules.dep"; then
      echo "$v"
      return
    fi
  done
}

# What is missing for the guest, as words for the skip message; empty when nothing is.
missing_tools() {
  local m=()
  command -v qemu-system-x86_64 >/dev/null || m+=(qemu-system-x86_64)
  [[ -n $(find_kernel) ]] || m+=("Debian's kernel (/boot/vmlinuz-* with sch_netem in /lib/modules)")
  [[ -x /bin/busybox ]] || m+=(busybox)
  local t
  for t in cpio iperf3 ping; do command -v $t >/dev/null || m+=("$t"); done
  echo "${m[*]}"
}

missing=$(missing_tools)
if [[ -n $missing ]]; then
  packages=(qemu-system-x86 linux-image-amd64 busybox-static cpio iperf3 iputils-ping iproute2)
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    skip "missing $missing; installing it needs root (apt-get install ${packages[*]})"
  fi
  command -v apt-get >/dev/null || skip "missing $missing, and there is no apt-get here to install it"
  echo "vm: missing $missing: installing ${packages[*]} (apt-get; the kernel package takes about a minute)"
  export DEBIAN_FRONTEND=noninteractive
  apt_log=$(mktemp /tmp/wanlab-vm-apt.XXXXXX)
  if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${packages[@]}" >"$apt_log" 2>&1; then
    "${sudo[@]}" apt-get update -q >>"$apt_log" 2>&1 || true
    if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${packages[@]}" >>"$apt_log" 2>&1; then
      tail -5 "$apt_log"
      skip "missing $missing, and apt-get could not install ${packages[*]} (log: $apt_log)"
    fi
  fi
  rm -f "$apt_log"
  missing=$(missing_tools)
  [[ -z $missing ]] || skip "installed ${packages[*]}, but still missing $missing"
  echo "vm: installed in $(elapsed) s"
fi

kver=$(find_kernel)
kernel=/boot/vmlinuz-$kver
moddir=/lib/modules/$kver
[[ -r $kernel ]] || skip "$kernel is not readable (run as root)"

# ---- the initramfs ----

work=$build_dir/vm
root=$work/root
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,var/tmp,lib/modules}

# Copies a file to the same absolute path inside the initramfs (symlinks resolved).
put() {
  local src=$1 dst=$root${2:-$1}
  mkdir -p "$(dirname "$dst")"
  cp -L "$src" "$dst"
}

# A program and every shared library it needs (ldd: sonames at their paths, and the
# dynamic loader at the path the program names). Binaries of this build are copied
# without their debug information, which is most of their size.
put_program() {
  local src=$1 dst=${2:-$1} lib
  put "$src" "$dst"
  if [[ $src == "$build_dir"/* ]]; then strip --strip-debug "$root$dst" 2>/dev/null || true; fi
  while read -r lib; do
    if [[ -n $lib && ! -e $root$lib ]]; then put "$lib"; fi
  done < <(ldd "$src" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
}

put_program "$wanlab_bin"
put_program "$tests_bin"
# busybox: the shell, mount, insmod, poweroff and the rest of /init's tools (applets as
# symlinks in /bin); the real tools the tests run go to /usr/bin, first on PATH.
put_program /bin/busybox /bin/busybox
# /bin/sh is dash where there is one, as on Debian: Debian's static busybox shell runs its
# own applets (ip, ping, ...) before anything on PATH, and popen() goes through /bin/sh.
if [[ -x /bin/dash ]]; then
  put_program "$(readlink -f /bin/dash)" /bin/dash
  ln -s dash "$root/bin/sh"
fi
for applet in $(/bin/busybox --list); do
  if [[ ! -e $root/bin/$applet ]]; then ln -s busybox "$root/bin/$applet"; fi
done
for tool in iperf3 ping ip tc; do
  path=$(command -v "$tool" || true)
  if [[ -n $path ]]; then
    put_program "$(readlink -f "$path")" "/usr/bin/$tool"
  elif [[ $tool == ip || $tool == tc ]]; then
    echo "vm: note: no $tool here; the tests' tc cross-checks will be left out"
  else
    fail "$tool is not installed"
  fi
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"

# Kernel modules with their dependencies from modules.dep, in load order (dependencies
# first), decompressed here: busybox's insmod takes plain .ko files.
declare -A dep_of=()
while IFS=: read -r mod deps; do dep_of[$mod]=$deps; done <"$moddir/modules.dep"
declare -A loaded=()
order=()
add_module() {
  local mod=$1 i
  if [[ -n ${loaded[$mod]:-} ]]; then return; fi
  loaded[$mod]=1
  local deps=(${dep_of[$mod]:-})
  for ((i = ${#deps[@]} - 1; i >= 0; i--)); do add_module "${deps[i]}"; done
  order+=("$mod")
}
for name in veth bridge sch_htb sch_netem cls_u32; do
  path=$(printf '%s\n' "${!dep_of[@]}" | grep -E "/${name}\.ko(\.xz|\.zst|\.gz)?$" | head -1)
  [[ -n $path ]] || fail "no module $name in $moddir/modules.dep"
  add_module "$path"
done
: >"$root/etc/wanlab-vm.modules"
for mod in "${order[@]}"; do
  plain=${mod%.xz}
  plain=${plain%.zst}
  plain=${plain%.gz}
  mkdir -p "$(dirname "$root/lib/modules/$plain")"
  case $mod in
    *.xz) xz -dc "$moddir/$mod" >"$root/lib/modules/$plain" ;;
    *.zst) zstd -qdc "$moddir/$mod" >"$root/lib/modules/$plain" ;;
    *.gz) gzip -dc "$moddir/$mod" >"$root/lib/modules/$plain" ;;
    *) cp "$moddir/$mod" "$root/lib/modules/$plain" ;;
  esac
  echo "$plain" >>"$root/etc/wanlab-vm.modules"
done

cp "$here/init" "$root/init"
chmod 755 "$root/init"
{
  printf 'WANLAB_VM_TESTS=%q\n' "$tests_bin"
  printf 'export WANLAB_BINARY=%q\n' "$wanlab_bin"
  args=""
  if ((${#test_args[@]})); then args=$(printf '%q ' "${test_args[@]}"); fi
  printf 'WANLAB_VM_ARGS=%q\n' "$args"
} >"$root/etc/wanlab-vm.conf"

initrd=$work/initramfs.cpio.gz
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -1 >"$initrd"
echo "vm: kernel $kernel; initramfs $initrd ($(du -h "$initrd" | cut -f1), modules: $(tr '\n' ' ' <"$root/etc/wanlab-vm.modules" | sed 's|[^ ]*/||g'))"
# The guest's clock. By default qemu counts instructions (-icount): the virtual CPU runs
# 1e9 instructions per virtual second (shift=0) and skips idle time (sleep=off), so the
# guest's timers fire on time and its CPU has the same speed whatever the host is doing;
# qemu then runs one vCPU (instruction counting is single-threaded). --realtime: the guest
# clock follows the host's, and host load shows in the guest as late timers (README.md).
if ((realtime)); then
  clock=(-smp 2)
  clock_text="real-time clock, 2 vCPUs"
else
  clock=(-icount shift=0,sleep=off -smp 1)
  clock_text="instruction-counted clock, 1 vCPU"
fi
# A higher priority where allowed: with real time it keeps host load out of the figures as
# far as it can; with instruction counting it only shortens the wall-clock time.
prio=()
if nice -n -10 true 2>/dev/null; then prio=(nice -n -10); fi
echo "vm: built in $(elapsed) s; booting qemu (TCG, $clock_text, 2 GiB), limit ${timeout_s} s"

# ---- boot ----

log=$work/console.log
report=$work/kernel-report.xml
rm -f "$log" "$report"
set +e
"${prio[@]}" timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -m 2048 "${clock[@]}" \
  -nodefaults -nographic -no-reboot -serial stdio -monitor none \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1" </dev/null |
  sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' | tee "$log"
qemu_rc=${PIPESTATUS[0]}
set -e

echo
sed -n '/^WANLAB-VM-REPORT-BEGIN$/,/^WANLAB-VM-REPORT-END$/p' "$log" | sed '1d;$d' >"$report"
[[ -s $report ]] || rm -f "$report"
guest_rc=$(sed -n 's/^WANLAB-VM-EXIT: \([0-9]*\)$/\1/p' "$log" | tail -1)
if [[ -z $guest_rc ]]; then
  if [[ $qemu_rc -eq 124 || $qemu_rc -eq 137 ]]; then
    fail "the guest did not finish within ${timeout_s} s (console: $log)"
  fi
  fail "the guest stopped without a test status (qemu exit $qemu_rc; console: $log)"
fi

echo "vm: measured in the guest:"
grep '^MEASURED: ' "$log" | sed 's/^MEASURED: /  /' || true
if [[ -f $report ]]; then
  tests=$(grep -o '<testsuite [^>]*' "$report" | grep -o 'tests="[0-9]*"' | grep -o '[0-9]*' || echo '?')
  failures=$(grep -o '<testsuite [^>]*' "$report" | grep -o 'failures="[0-9]*"' | grep -o '[0-9]*' || echo '?')
  errors=$(grep -o '<testsuite [^>]*' "$report" | grep -o 'errors="[0-9]*"' | grep -o '[0-9]*' || echo '?')
  echo "vm: report $report: $tests tests, $failures failures, $errors errors"
  if [[ $failures != 0 || $errors != 0 ]]; then
    # The failing cases and their messages, here, at the end of the tier's output (a CI log
    # keeps the tail of a long output).
    echo "vm: failed in the guest:"
    awk '/<testcase /{name=$0} /<failure|<error/{print "  " name; n=8} n>0{print "    " $0; n--}' "$report" | head -80
  fi
fi
if [[ $guest_rc -ne 0 ]]; then
  echo "vm: the guest's last console lines:"
  grep -v '^MEASURED: ' "$log" | grep -v '^ *$' | tail -25 | sed 's/^/  /'
fi
echo "vm: console $log"
echo "vm: guest tests exited $guest_rc; whole tier $(elapsed) s"
# 77 from inside means the guest's kernel lacked netem: a failure here, not a skip.
[[ $guest_rc -eq 77 ]] && exit 1
exit "$guest_rc"
