#!/usr/bin/env bash
# Every relative link of the documentation resolves: README.md and docs/*.md.
#
# Usage: tests/check_links.sh [REPO_ROOT] [FILE.md ...]
#   (CTest `docs.links`; with FILEs, those pages instead of README.md and docs/*.md)
#
# A link is `[text](target)`, `![alt](target)` or a reference definition
# `[label]: target`, outside fenced code blocks and inline code spans. Targets
# with a scheme (https:, http:, mailto:, ...) are skipped. `path` must exist
# relative to the page; `path#anchor` and `#anchor` must also name a heading of
# the target page (when it is a .md file), by GitHub's rule: the heading's text
# (links reduced to their text, code spans to their content) lowercased,
# punctuation other than '-' and '_' removed, each space made a '-'; the second
# heading with the same anchor gets '-1', the third '-2', ... (`<a id="x">` and
# `<a name="x">` count too).
#
# Prints one line per broken link (`file:line: broken link 'target'`) and exits
# 1, or prints a one-line summary and exits 0. Needs bash, grep, sed and awk.
set -euo pipefail
export LC_ALL=C

root=${1:-$(dirname "$0")/..}
shift || true
cd "$root"
if (($# > 0)); then
  pages=("$@")
else
  pages=(README.md docs/*.md)
fi

# The awk functions both passes share: fences and code spans.
# shellcheck disable=SC2016 # an awk program: its $ are awk's
awk_common='
# Fenced code blocks: ``` or ~~~ (3 or more) opens, the same character at least
# as many times closes. Returns 1 when the line is part of a fence.
function in_fence(line,    m, c) {
  if (fence_len == 0) {
    if (match(line, /^ ? ? ?(````*|~~~~*)/)) {
      m = substr(line, RSTART, RLENGTH); sub(/^ +/, "", m)
      fence_char = substr(m, 1, 1); fence_len = length(m)
      if (fence_char == "`" && index(substr(line, RSTART + RLENGTH), "`") > 0) {
        fence_len = 0; return 0  # ```x` is inline code, not a fence
      }
      return 1
    }
    return 0
  }
  if (match(line, /^ ? ? ?(````*|~~~~*)[ \t]*$/)) {
    m = substr(line, RSTART, RLENGTH); sub(/^ +/, "", m); sub(/[ \t]+$/, "", m)
    if (substr(m, 1, 1) == fence_char && length(m) >= fence_len) fence_len = 0
  }
  return 1
}
# The line with every inline code span replaced by `keep` (1: the span`s
# content, 0: the word CODE). A span opened and not closed on a line goes on
# into the next line of the paragraph (span_open holds its backtick count).
function strip_code(s, keep,    out, run, n, tmp, off, start) {
  out = ""
  if (s ~ /^[ \t]*$/) { span_open = 0; return s }
  if (span_open > 0) {
    n = span_open; tmp = s; off = 0; start = 0
    while (match(tmp, /`+/)) {
      if (RLENGTH == n) { start = off + RSTART; break }
      off += RSTART + RLENGTH - 1; tmp = substr(tmp, RSTART + RLENGTH)
    }
    if (!start) return keep ? s : "CODE"
    out = keep ? substr(s, 1, start - 1) : "CODE"
    s = substr(s, start + n); span_open = 0
  }
  while (match(s, /`+/)) {
    out = out substr(s, 1, RSTART - 1)
    run = substr(s, RSTART, RLENGTH); n = RLENGTH
    s = substr(s, RSTART + RLENGTH)
    tmp = s; off = 0; start = 0
    while (match(tmp, /`+/)) {
      if (RLENGTH == n) { start = off + RSTART; break }
      off += RSTART + RLENGTH - 1; tmp = substr(tmp, RSTART + RLENGTH)
    }
    if (!start) { span_open = n; return out (keep ? s : "CODE") }
    out = out (keep ? substr(s, 1, start - 1) : "CODE")
    s = substr(s, start + n)
  }
  return out s
}
'

# The anchors of a page, one a line.
anchors_of() {
  awk "$awk_common"'
    function slug(t) {
      while (match(t, /!?\[[^]]*\]\([^)]*\)/)) {
        lt = substr(t, RSTART, RLENGTH); sub(/^!?\[/, "", lt); sub(/\]\(.*$/, "", lt)
        t = substr(t, 1, RSTART - 1) lt substr(t, RSTART + RLENGTH)
      }
      t = tolower(t)
      # Non-ASCII punctuation GitHub drops: dashes, arrows, ellipsis, quotes, x, middle dot.
      gsub(/\342\200\224|\342\200\223|\342\206\222|\342\200\246|\342\200\231|\342\200\234|\342\200\235|\303\227|\302\267/, "", t)
      gsub(/[][!"#$%&\047()*+,.\/:;<=>?@\\^`{|}~]/, "", t)
      gsub(/[ \t]/, "-", t)
      return t
    }
    {
      if (in_fence($0)) { span_open = 0; next }
      line = $0
      while (match(line, /<a [^>]*(id|name)="[^"]*"/)) {
        a = substr(line, RSTART, RLENGTH); sub(/^.*(id|name)="/, "", a); sub(/"$/, "", a)
        print a; line = substr(line, RSTART + RLENGTH)
      }
      if ($0 !~ /^ ? ? ?##?#?#?#?#?([ \t]|$)/) { strip_code($0, 1); next }
      span_open = 0
      t = $0
      sub(/^ ? ? ?#+[ \t]*/, "", t); sub(/[ \t]+#+[ \t]*$/, "", t); sub(/[ \t]+$/, "", t)
      t = slug(strip_code(t, 1)); span_open = 0
      if (t in seen) print t "-" seen[t]; else print t
      seen[t]++
    }' "$1"
}

# The links of a page: "LINE<TAB>TARGET", one a line.
links_of() {
  awk "$awk_common"'
    function emit(target) {
      sub(/^[ \t]+/, "", target); sub(/[ \t].*$/, "", target)
      sub(/^</, "", target); sub(/>$/, "", target)
      print FNR "\t" target
    }
    {
      if (in_fence($0)) { span_open = 0; next }
      line = strip_code($0, 0)
      if (match(line, /^ ? ? ?\[[^]]+\]:[ \t]*[^ \t]+/)) {
        t = line; sub(/^ ? ? ?\[[^]]+\]:[ \t]*/, "", t); emit(t); next
      }
      while (match(line, /\[[^]]*\]\([^)]*\)/)) {
        t = substr(line, RSTART, RLENGTH); sub(/^\[[^]]*\]\(/, "", t); sub(/\)$/, "", t)
        emit(t)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

declare -A anchors=()
bad=0 count=0
for page in "${pages[@]}"; do
  [[ -f $page ]] || { echo "$page: no such page"; bad=1; continue; }
  dir=$(dirname "$page")
  while IFS=$'\t' read -r line target; do
    count=$((count + 1))
    [[ $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue  # https:, mailto:, ...
    path=${target%%#*} anchor=""
    [[ $target == *"#"* ]] && anchor=${target#*#}
    if [[ -z $path ]]; then
      file=$page
    else
      file=$dir/$path
    fi
    if [[ -z $target || ! -e $file ]]; then
      echo "$page:$line: broken link '$target'"
      bad=1
      continue
    fi
    if [[ -n $anchor && $file == *.md ]]; then
      [[ -v anchors[$file] ]] || anchors[$file]=$'\n'$(anchors_of "$file")$'\n'
      if [[ ${anchors[$file]} != *$'\n'"$anchor"$'\n'* ]]; then
        echo "$page:$line: broken link '$target'"
        bad=1
      fi
    fi
  done < <(links_of "$page")
done
((bad == 0)) && echo "check_links: ${#pages[@]} pages, $count links, every relative link resolves"
exit $bad
