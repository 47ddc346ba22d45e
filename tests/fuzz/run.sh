#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz/README.md): builds them with clang in a build folder
# of their own and runs each in turn.
#
#   tests/fuzz/run.sh [--seconds N | --runs N] [--build-dir DIR] [--jobs J] [HARNESS...]
#
# --seconds N  fuzz each harness for N seconds (default 3)
# --runs N     fuzz each harness for N executions instead (e.g. 1000000)
# --build-dir  the fuzz build folder (default: build-fuzz/); its corpus/ keeps what each
#              harness found, so later runs start from there; artifacts/ gets the inputs
#              that failed, logs/ each harness's output
# --jobs J     parallel compile jobs (default: the number of CPUs)
# HARNESS      topology scenario trace mahimahi api protocol (default: all)
#
# A harness fails on a crash, a sanitizer report (address, undefined behaviour, leak), a
# failed check of the harness, an input running over 25 s, over 2048 MB of memory, or one
# allocation over 512 MB (an allocation sized by the input rather than bounded). The
# failing input is saved under artifacts/; rerun it with
#   DIR/tests/fuzz/fuzz_HARNESS ARTIFACT
# Where clang or its libFuzzer is missing it prints "SKIPPED: <reason>" and exits 77, which
# ctest reports as skipped. Exit 1 when any harness failed.
set -euo pipefail
export LC_ALL=C  # lengths in bytes

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build-fuzz
seconds=3
runs=
jobs=$(nproc 2>/dev/null || echo 2)
all=(topology scenario trace mahimahi api protocol)
harnesses=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; runs=; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    *)
      if [[ " ${all[*]} " != *" $1 "* ]]; then
        echo "fuzz: unknown harness '$1' (harnesses: ${all[*]})" >&2
        exit 2
      fi
      harnesses+=("$1"); shift ;;
  esac
done
((${#harnesses[@]})) || harnesses=("${all[@]}")
for n in "$seconds" "${runs:-1}" "$jobs"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: '$n' is not a positive whole number" >&2; exit 2; }
done

skip() {
  echo "SKIPPED: $*"
  exit 77
}

# clang, the one that compiles libFuzzer in (Debian: clang, or clang-NN).
cxx=${WANLAB_FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-{19,18,17,16,15,14,13}; do
    if command -v "$c" >/dev/null; then cxx=$(command -v "$c"); break; fi
  done
fi
[[ -n $cxx ]] || skip "no clang++ (libFuzzer): apt-get install clang"
cc=${cxx/clang++/clang}
command -v "$cc" >/dev/null || skip "no $cc next to $cxx"
command -v cmake >/dev/null || skip "no cmake"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
  skip "$cxx cannot link libFuzzer with the sanitizers ($(head -c 300 "$probe/log" | tr '\n' ' '))"
fi

# Configure once (later builds re-run CMake where its files changed).
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  echo "fuzz: configuring $build_dir with $cxx"
  cmake -S "$repo" -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWANLAB_FUZZ=ON \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" >"$probe/configure.log" 2>&1 ||
    { cat "$probe/configure.log"; echo "fuzz: configuring the fuzz build failed"; exit 1; }
fi
targets=()
for h in "${harnesses[@]}"; do targets+=(--target "fuzz_$h"); done
echo "fuzz: building ${harnesses[*]} in $build_dir"
t0=$(date +%s)
cmake --build "$build_dir" -j "$jobs" "${targets[@]}" >"$probe/build.log" 2>&1 ||
  { tail -n 60 "$probe/build.log"; echo "fuzz: building the harnesses failed"; exit 1; }
echo "fuzz: built in $(($(date +%s) - t0)) s"

# Seeds: the shipped files each harness reads, rebuilt every run.
seeds=$build_dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{topology,scenario,trace,mahimahi,api,protocol} "$build_dir"/{artifacts,logs}
cp "$repo"/topologies/*.json "$seeds/topology/"
find "$repo/bench/scenarios" -name '*.json' | while read -r f; do
  rel=${f#"$repo/bench/scenarios/"}
  cp "$f" "$seeds/scenario/${rel//\//-}"
done
cp "$repo"/traces/*.csv "$repo"/traces/generated/*.csv "$seeds/trace/"
# A Mahimahi seed is the file and one byte choosing the window (mahimahi.cpp): 100 ms.
for f in "$repo"/traces/mahimahi/*.mahi; do
  { cat "$f"; printf '\x63'; } >"$seeds/mahimahi/$(basename "$f")"
done
# Inputs that once failed (the window byte included).
cp "$here"/seeds/mahimahi/* "$seeds/mahimahi/"
cp "$here"/seeds/api/*.http "$seeds/api/"
# A protocol seed is one byte choosing the read size, then a frame per message: the length,
# 4 bytes big-endian, then the JSON text.
for f in "$here"/seeds/protocol/*.jsonl; do
  for chunk in 0 6 63; do
    out=$seeds/protocol/$(basename "$f" .jsonl)-$chunk
    printf "\\x$(printf %02x "$chunk")" >"$out"
    while IFS= read -r line; do
      n=${#line}
      printf "\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))" >>"$out"
      printf '%s' "$line" >>"$out"
    done <"$f"
  done
done

if [[ -n $runs ]]; then limit=(-runs="$runs"); what="$runs executions"; else limit=(-max_total_time="$seconds"); what="$seconds s"; fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for h in "${harnesses[@]}"; do
  corpus=$build_dir/corpus/$h
  mkdir -p "$corpus"
  dict=()
  case $h in topology|scenario|api) dict=(-dict="$here/json.dict") ;; esac
  log=$build_dir/logs/$h.log
  echo "fuzz: $h for $what"
  set +e
  "$build_dir/tests/fuzz/fuzz_$h" "${limit[@]}" "${dict[@]}" -max_len=4096 -timeout=25 \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$build_dir/artifacts/$h-" "$corpus" "$seeds/$h" >"$log" 2>&1
  rc=$?
  set -e
  done_line=$(grep -E '^Done [0-9]+ runs in' "$log" | tail -n 1 || true)
  if ((rc == 0)) && [[ -n $done_line ]]; then
    echo "fuzz: $h ok: ${done_line#Done }, corpus $(find "$corpus" -type f | wc -l) inputs"
  else
    failed+=("$h")
    echo "fuzz: $h FAILED (exit $rc); from $log:"
    grep -E 'ERROR|SUMMARY|fuzz check failed|runtime error|exception|malloc\(|out-of-memory|Test unit written' "$log" |
      head -n 20 | sed 's/^/  /'
    echo "  ... the stack (the log has it whole):"
    grep -E '^ +#[0-9]+ 0x' "$log" | grep -v -E 'libFuzzer|fuzzer::|__sanitizer|__asan|libc\.so|compiler-rt| in (main|_start|__libc_start|abort|raise|__pthread_kill)' |
      head -n 12 | sed 's/^/  /'
    artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n 1 | sed 's/Test unit written to //' || true)
    [[ -n $artifact ]] && echo "fuzz: $h: the input is $artifact (rerun: $build_dir/tests/fuzz/fuzz_$h $artifact)"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#harnesses[@]} harnesses ok ($what each)"
