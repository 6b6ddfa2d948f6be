#!/usr/bin/env bash
# Sizes that keep src/ readable: no source file over MAX_FILE lines (600), and
# no function of the command layer (src/cli/) over MAX_CLI_FUNCTION lines
# (60): commands parse their options and call the library.
# Usage: tests/check_sizes.sh [SRC_DIR] [--report]
#   --report  also list the longest functions of every layer (no failure for them)
# A function is counted from its first line at column 0 (the one naming it)
# to its closing brace at column 0 (clang-format's layout), lambdas and
# nested blocks included.
set -euo pipefail
src=${1:-$(dirname "$0")/../src}
report=${2:-}
max_file=${MAX_FILE:-600}
max_cli=${MAX_CLI_FUNCTION:-60}

# Prints "lines<TAB>file:line<TAB>first line" for every top-level function of a file.
functions() {
  awk '
    FNR == 1 { start = 0 }
    start == 0 && /^[A-Za-z_~].*\(/ && !/^(namespace|struct|class|enum|union|using|typedef|extern|static_assert)/ &&
        !/;[ \t]*$/ && !/^template <[^>]*>$/ {
      if (/\{.*\}[ \t]*$/) next  # a one-line function
      start = FNR; name = $0; open = index($0, "{") > 0; next
    }
    start > 0 && /^}/ { printf "%d\t%s:%d\t%s\n", FNR - start + 1, FILENAME, start, substr(name, 1, 90); start = 0; next }
    start > 0 && !open { if (index($0, "{") > 0) open = 1; else if ($0 ~ /;[ \t]*$/) start = 0 }
  ' "$@"
}

bad=0
while read -r n file; do
  if ((n > max_file)); then
    echo "check_sizes: ${file#"$src"/} has $n lines (at most $max_file: split it by concern)"
    bad=1
  fi
done < <(find "$src" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
           -exec wc -l {} + | grep -v ' total$')
while IFS=$'\t' read -r n where name; do
  if ((n > max_cli)); then
    echo "check_sizes: ${where#"$src"/}: a command function of $n lines (at most $max_cli: move the work into the library): $name"
    bad=1
  fi
done < <(functions "$src"/cli/*.cpp)
if [[ $report == --report ]]; then
  echo "longest functions:"
  functions $(find "$src" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)) |
    sort -rn | head -20 | sed "s|$src/||"
fi
((bad == 0)) && echo "check_sizes: every file of src/ within $max_file lines, every src/cli function within $max_cli"
exit $bad
