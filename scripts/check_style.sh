#!/usr/bin/env bash
# clang-format check of the C++ sources (src/ include/ tools/ tests/cpp).
#   scripts/check_style.sh            check every C++ file; exit 1 if any needs reformatting
#   scripts/check_style.sh --fix      reformat them in place
#   scripts/check_style.sh FILE...    check only these files (as pre-commit passes them)
# Uses $CLANG_FORMAT, else .venv/bin/clang-format, else clang-format on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  if [ -x .venv/bin/clang-format ]; then cf=.venv/bin/clang-format
  elif command -v clang-format >/dev/null 2>&1; then cf=clang-format
  else
    echo "clang-format not found: run \`make lint\` (installs it into .venv) or set CLANG_FORMAT" >&2
    exit 2
  fi
fi

files=()
if [ $# -gt 0 ]; then
  for f in "$@"; do
    case "$f" in *.h|*.hpp|*.cpp|*.cc) [ -f "$f" ] && files+=("$f") ;; esac
  done
else
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find src include tools tests/cpp -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' \) \
      -print0 2>/dev/null | sort -z)
fi
[ ${#files[@]} -eq 0 ] && { echo "check_style: no C++ files"; exit 0; }

if [ $fix -eq 1 ]; then
  "$cf" -i --style=file "${files[@]}"
  echo "check_style: formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_style: ${#bad[@]} of ${#files[@]} files need clang-format (run \`make format\`):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_style: ${#files[@]} files ok"
