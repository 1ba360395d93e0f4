#!/usr/bin/env bash
# Formats the C and C++ sources git tracks (cpp/, launcher/, tests/, bench/, examples/) in place
# with clang-format and the .clang-format files of the tree.
#   scripts/format.sh           formats every file
#   scripts/format.sh --check   changes nothing; lists the files that differ from their formatted
#                               form and exits 1 if there are any
# The clang-format is the version scripts/setup.sh pins (the pip package), so that every machine
# formats alike; CLANG_FORMAT=path overrides it (its version must still match).
set -euo pipefail
cd "$(dirname "$0")/.."
want=23.1.5
check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

cf=${CLANG_FORMAT:-$(python3 -c 'import clang_format; print(clang_format.get_executable("clang-format"))' \
  2>/dev/null || true)}
if [ -z "$cf" ] || [ ! -x "$cf" ]; then
  echo "format.sh: clang-format $want not found: pip install clang-format==$want (scripts/setup.sh)" >&2
  exit 2
fi
version=$("$cf" --version)
case "$version" in
  *" $want"*) ;;
  *) echo "format.sh: $cf is '$version', not $want: pip install clang-format==$want" >&2; exit 2 ;;
esac

mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.cu' '*.h' '*.hpp' '*.cuh')
if [ $check = 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 16 -P "$(nproc)" "$cf" -i
  exit 0
fi
# shellcheck disable=SC2016  # $CF and $1 are the inner shell's
differ=$(printf '%s\0' "${files[@]}" | CF="$cf" xargs -0 -n 1 -P "$(nproc)" \
  sh -c '"$CF" "$1" | cmp -s - "$1" || echo "$1"' format-check | sort)
if [ -n "$differ" ]; then
  echo "$differ"
  echo "format.sh: $(echo "$differ" | wc -l) of ${#files[@]} files differ from clang-format's output;" \
    "run scripts/format.sh" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted"
