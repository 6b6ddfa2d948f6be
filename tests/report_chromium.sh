#!/usr/bin/env bash
# The run report in a real browser: strata report on two short runs (the
# quickstart and LayerSkip e2e runs) and an evaluation with every exit, opened
# in headless Chromium (Debian's chromium). Checks that the page loads with no
# console error or failed request, that the DOM Chromium built holds every
# chart as SVG with its lines, and that the screenshot shows the two runs'
# colours (pixels counted with png_probe); and that --png drew the charts.
# Usage: report_chromium.sh STRATA PNG_PROBE WORKDIR BASE_RUN LAYERSKIP_RUN STORIES_CKPT
set -euo pipefail
strata=$1 probe=$2 work=$3 base=$4 ls=$5 stories=$6
fail() { echo "FAIL: $*"; exit 1; }
browser=""
for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null && { browser=$b; break; }
done
[[ -n $browser ]] || fail "no chromium found (launch/setup.sh installs Debian's chromium)"
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)

"$strata" eval --device cpu --checkpoint "$stories" --perplexity data/corpora/tinystories/tinystories_sample.txt \
  --exit-layer all --out "$work/eval.json" >/dev/null 2>&1 || fail "strata eval"
out=$("$strata" report "$base" "$ls" --eval "stories260K=$work/eval.json" --out "$work/report.html" --png)
echo "$out"
charts=$(sed -n 's/^wrote .*report.html: 2 run(s), 1 evaluation file(s), \([0-9]*\) chart(s)$/\1/p' <<<"$out")
[[ -n $charts ]] || fail "unexpected strata report output"
(( charts >= 8 )) || fail "only $charts charts"

chrome() {  # chrome ARGS...: headless, no sandbox (root), its own profile, console to stderr
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$work/profile" --enable-logging=stderr --v=0 "$@"
}
chrome --dump-dom "file://$work/report.html" >"$work/dom.html" 2>"$work/chromium-dom.log" \
  || { cat "$work/chromium-dom.log"; fail "chromium --dump-dom"; }
if grep -E "CONSOLE|Uncaught|Failed to load resource|net::ERR" "$work/chromium-dom.log"; then
  fail "the page logged errors in Chromium"
fi
svgs=$(grep -o "<svg " "$work/dom.html" | wc -l)
[[ $svgs == "$charts" ]] || fail "the DOM has $svgs SVG charts, strata wrote $charts"
for id in loss val_loss lr tokens_per_s exit_loss_layerskip exit_loss_last; do
  grep -q "<figure class=\"chart\" id=\"chart-$id\"" "$work/dom.html" || fail "no chart $id in the DOM"
done
lines=$(grep -o "<polyline" "$work/dom.html" | wc -l)
(( lines >= 2 * 5 + 6 )) || fail "only $lines polylines in the DOM"
grep -q "stories260K" "$work/dom.html" || fail "the evaluation table is missing"

chrome --hide-scrollbars --window-size=1500,1400 --screenshot="$work/shot.png" \
  "file://$work/report.html" >"$work/chromium-shot.log" 2>&1 || { cat "$work/chromium-shot.log"; fail "screenshot"; }
read -r _ size < <("$probe" "$work/shot.png" | head -1)
[[ $size == 1500x1400 ]] || fail "screenshot is $size"
blue=$("$probe" "$work/shot.png" "#1f77b4" | awk 'NR==2{print $2}')
red=$("$probe" "$work/shot.png" "#d62728" | awk 'NR==2{print $2}')
echo "screenshot: $blue pixels of the first run's colour, $red of the second's"
(( blue > 400 && red > 400 )) || fail "the screenshot does not show both runs' lines"

n=0
for png in "$work"/report_*.png; do
  "$probe" "$png" "#1f77b4" >/dev/null || fail "$png is not a PNG"
  n=$((n + 1))
done
[[ $n == "$charts" ]] || fail "--png wrote $n pictures for $charts charts"
echo "report in chromium: OK ($charts charts)"
