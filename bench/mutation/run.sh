#!/usr/bin/env bash
# Mutation testing of webhook/informer/ with mutmut (a bench job, not part of the normal pytest run).
#
#   bench/mutation/run.sh [-j N] [MODULE_GLOB]     e.g. bench/mutation/run.sh -j 2 'webhook/informer/reflector.py'
#   CONFIG=bench/mutation/setup-unit.cfg bench/mutation/run.sh    unit tests only (~25 min on 2 cores)
#
# Copies the repository (webhook/, tests/, pyproject.toml) to a scratch directory, puts setup.cfg there,
# runs `mutmut run` with the informer's unit and component tests, and prints the kill rate:
# killed / (killed + survived + timeouts + suspicious). Survivors are listed for `mutmut show NAME` in the
# scratch directory (printed). Needs mutmut (pip install -r bench/mutation/requirements.txt).
set -euo pipefail
jobs=2
if [[ "${1:-}" == "-j" ]]; then jobs="$2"; shift 2; fi
only="${1:-webhook/informer/*}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
scratch="$(mktemp -d /tmp/tollgate-mutation.XXXXXX)"
cp -r "$root/webhook" "$root/tests" "$root/policies" "$root/pyproject.toml" "$scratch/"
config="${CONFIG:-bench/mutation/setup.cfg}"
sed "s#^    webhook/informer/\*\$#    $only#" "$root/$config" > "$scratch/setup.cfg"
cd "$scratch"
echo "scratch: $scratch"
"$py" -m mutmut run --max-children "$jobs" > mutmut-run.log 2>&1 || true
"$py" -m mutmut results --all true > results.txt 2>&1 || true
"$py" "$root/bench/mutation/summarize.py" results.txt
