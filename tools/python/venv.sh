#!/usr/bin/env bash
# A Python virtual environment with the given packages, for the tests and benchmarks that
# drive seqserve from Python clients. Packages come from pip's configured indexes. Where
# only extra indexes are configured, the first is passed as --index-url and the others as
# --extra-index-url, so an unreachable default index (PyPI) is never tried. Idempotent: an environment that already imports the modules is kept.
#
#   tools/python/venv.sh <dir> <import check> <package>...
#   e.g. tools/python/venv.sh .bench/venv "import grpc" grpcio numpy
# Prints the environment's python on success.
set -euo pipefail
dir="$1"
check="$2"
shift 2
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "$check" 2>/dev/null; then
  echo "$dir/bin/python"
  exit 0
fi
indexes=()
main_index="${PIP_INDEX_URL:-$(pip3 config get global.index-url 2>/dev/null || true)}"
# With a main index configured, pip's own configuration is used as it is.
[ -z "$main_index" ] && read -r -a configured <<< "${PIP_EXTRA_INDEX_URL:-$(pip3 config get global.extra-index-url 2>/dev/null || true)}"
if [ -z "$main_index" ] && [ "${#configured[@]}" -gt 0 ]; then
  indexes+=(--index-url "${configured[0]}")
  for url in "${configured[@]:1}"; do indexes+=(--extra-index-url "$url"); done
fi
python3 -m venv "$dir" >&2
"$dir/bin/pip" install --quiet --disable-pip-version-check "${indexes[@]}" "$@" >&2
"$dir/bin/python" -c "$check" >&2
echo "$dir/bin/python"
