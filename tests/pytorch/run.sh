#!/usr/bin/env bash
# The pytorch tier (tests/pytorch/run.py says what it checks): a two-rank PyTorch gloo job
# through `wanlab launch` across two DCs. Run it as the netns tier is run, one lab at a time:
#   flock /tmp/wanlab-root-tests.lock tests/pytorch/run.sh [--build-dir DIR] [--lab NAME] [--keep]
# Exit 77 with "SKIPPED: <reason>" where it cannot run (ctest: skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x /usr/bin/python3 ]]; then
  echo "SKIPPED: no /usr/bin/python3 (Debian's python3 and python3-torch; scripts/setup.sh)"
  exit 77
fi
exec /usr/bin/python3 "$here/run.py" "$@"
