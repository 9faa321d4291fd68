#!/usr/bin/env bash
# tests/torch/run.sh N SCRIPT [ARGS]: SCRIPT under tools/ftcc-run -n N with the torch venv's Python;
# tests/torch/run.sh - SCRIPT [ARGS]: SCRIPT with that Python alone (it starts its own jobs).
# First brings the torch venv and ftcc-torch up to date (tools/torch-setup; quick when they are).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
"$root/tools/torch-setup"
py=$root/bench/training/.venv-torch/bin/python
n=$1
shift
[ "$n" = - ] && exec "$py" "$@"
exec "$root/tools/ftcc-run" -n "$n" "$py" "$@"
