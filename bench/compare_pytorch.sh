#!/usr/bin/env bash
# strata against PyTorch on the same training step, side by side.
#
# Runs `strata bench peak` once, then for every model shape and precision a few
# interleaved rounds of `strata bench train` and bench/pytorch_train_step.py,
# keeps the best round of each, and prints a markdown table (tokens/s, ratio,
# fraction of the machine's peak, peak RSS) and whether the targets are met.
# See bench/README.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY_SCRIPT="$ROOT/bench/pytorch_train_step.py"
VENV="$ROOT/bench/.venv-torch"

usage() {
  cat <<'EOF'
usage: bench/compare_pytorch.sh [options]

Times strata's training step and PyTorch's (bench/pytorch_train_step.py) on the
same Llama shapes, in interleaved rounds (strata, PyTorch, strata, ...), keeps
the best round of each, and prints the CPU, one markdown table and the targets.
Progress goes to stderr, the report to stdout.

options:
  --models LIST      model shapes, comma-separated: 288 (6L-288), 768 (12L-768),
                     1024 (24L-1024, sequence 1024) (default 288,768)
  --precisions LIST  fp32, bf16 (default fp32, plus bf16 where the CPU has
                     avx512_bf16 or amx_bf16)
  --steps S          timed steps per run; each run reports the median (default 3)
  --rounds R         interleaved rounds per model and precision (default 3)
  --vocab V          vocabulary size (default 32000)
  --torch WHICH      where PyTorch comes from (default auto):
                       auto    /usr/bin/python3 if it imports torch, else python3
                               if it does, else install Debian's (as debian)
                       debian  /usr/bin/python3 with Debian's python3-torch,
                               installed with apt-get if missing (root or sudo)
                       pypi    a virtual environment at bench/.venv-torch with
                               `pip install torch` (extra pip arguments from
                               $TORCH_PIP_ARGS, e.g. a CPU-only index)
                       PATH    this Python interpreter (must import torch)
  --strata PATH      the strata binary (default build/strata of this checkout)
  --out FILE         also write the report (table and targets) to FILE
  -h, --help         this text

PyTorch runs with --threads $(nproc), in round 1 under both the default
OMP_WAIT_POLICY and OMP_WAIT_POLICY=PASSIVE; the faster one is kept for the
other rounds. strata runs with its defaults.
EOF
}

log() { printf 'compare_pytorch: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- options
MODELS="288,768"
PRECISIONS=""
STEPS=3
ROUNDS=3
VOCAB=32000
TORCH=auto
STRATA="$ROOT/build/strata"
OUT=""

need_value() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value (see --help)"; }
while [[ $# -gt 0 ]]; do
  opt=$1 val=""
  if [[ $opt == --*=* ]]; then val=${opt#*=}; opt=${opt%%=*}; set -- "$opt" "$val" "${@:2}"; fi
  case $opt in
    -h|--help) usage; exit 0 ;;
    --models) need_value "$@"; MODELS=$2; shift 2 ;;
    --precisions) need_value "$@"; PRECISIONS=$2; shift 2 ;;
    --steps) need_value "$@"; STEPS=$2; shift 2 ;;
    --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
    --vocab) need_value "$@"; VOCAB=$2; shift 2 ;;
    --torch) need_value "$@"; TORCH=$2; shift 2 ;;
    --strata) need_value "$@"; STRATA=$2; shift 2 ;;
    --out) need_value "$@"; OUT=$2; shift 2 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

is_uint() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_uint "$STEPS" || die "--steps must be a positive integer, not '$STEPS'"
is_uint "$ROUNDS" || die "--rounds must be a positive integer, not '$ROUNDS'"
is_uint "$VOCAB" || die "--vocab must be a positive integer, not '$VOCAB'"
IFS=, read -r -a MODEL_LIST <<<"$MODELS"
[[ ${#MODEL_LIST[@]} -gt 0 ]] || die "--models is empty"
for m in "${MODEL_LIST[@]}"; do
  [[ $m == 288 || $m == 768 || $m == 1024 ]] ||
    die "unknown model '$m' in --models (choose 288, 768, 1024)"
done

# ---------------------------------------------------------------- the CPU
CPU_FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || true) "
has_flag() { [[ $CPU_FLAGS == *" $1 "* ]]; }
CPU_MODEL=$({ lscpu 2>/dev/null || true; } | sed -n 's/^Model name:[[:space:]]*//p' | head -n1 || true)
if [[ -z $CPU_MODEL ]]; then
  CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^[[:space:]]*//' || true)
fi
CPU_MODEL=${CPU_MODEL:-unknown}
CPU_ISA=""
for f in avx2 fma avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 sve asimd; do
  has_flag "$f" && CPU_ISA+="$f "
done
CPU_ISA=${CPU_ISA% }
NPROC=$(nproc 2>/dev/null || echo 1)
HAS_AMX_BF16=0
has_flag amx_bf16 && HAS_AMX_BF16=1

if [[ -z $PRECISIONS ]]; then
  PRECISIONS=fp32
  if has_flag avx512_bf16 || has_flag amx_bf16; then PRECISIONS+=",bf16"; fi
fi
IFS=, read -r -a PREC_LIST <<<"$PRECISIONS"
[[ ${#PREC_LIST[@]} -gt 0 ]] || die "--precisions is empty"
for p in "${PREC_LIST[@]}"; do
  [[ $p == fp32 || $p == bf16 ]] || die "unknown precision '$p' in --precisions (choose fp32, bf16)"
  if [[ $p == bf16 ]] && ! has_flag avx512_bf16 && ! has_flag amx_bf16; then
    log "warning: this CPU has neither avx512_bf16 nor amx_bf16; bf16 is emulated on both sides"
  fi
done

[[ -f $PY_SCRIPT ]] || die "missing $PY_SCRIPT"
[[ -x $STRATA ]] || die "no strata binary at '$STRATA' (build it, see docs/build.md, or pass --strata PATH)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/compare_pytorch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------- PyTorch
has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "installing packages needs root (or sudo): $*"
  fi
}

# Debian's python3-torch does its fp32 matmuls through the system BLAS
# (libblas.so.3, BLAS_INFO=generic). Without libopenblas0-pthread that is the
# netlib reference BLAS, about 3 GFLOP/s, which would make the comparison
# meaningless; libopenblas0-pthread installs OpenBLAS as the libblas.so.3
# alternative.
install_debian_torch() {
  command -v apt-get >/dev/null 2>&1 || die "no apt-get here: use --torch pypi or --torch PYTHON"
  log "installing Debian's PyTorch: apt-get install -y python3-torch libopenblas0-pthread"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch libopenblas0-pthread >&2
}

BLAS_NOTE=""
check_debian_blas() {
  local ma selected
  ma="$(uname -m)-linux-gnu"
  selected=$({ update-alternatives --query "libblas.so.3-$ma" 2>/dev/null || true; } | sed -n 's/^Value: //p')
  [[ -n $selected ]] || selected=$(readlink -f "/usr/lib/$ma/libblas.so.3" 2>/dev/null || true)
  if [[ $selected == *openblas-pthread* ]]; then
    BLAS_NOTE="libblas.so.3 -> $selected (OpenBLAS, pthreads)"
  else
    BLAS_NOTE="libblas.so.3 -> ${selected:-not found} (NOT OpenBLAS pthreads)"
    log "warning: Debian's torch uses the system BLAS for fp32 matmuls, and the selected"
    log "  libblas.so.3 is '${selected:-not found}', not OpenBLAS (pthreads). The reference"
    log "  BLAS runs at about 3 GFLOP/s. Fix: apt-get install libopenblas0-pthread, or"
    log "  update-alternatives --set libblas.so.3-$ma /usr/lib/$ma/openblas-pthread/libblas.so.3"
  fi
}

setup_pypi_torch() {
  local base
  if [[ -x $VENV/bin/python ]] && has_torch "$VENV/bin/python"; then return; fi
  base=$(command -v python3 || true)
  [[ -n $base ]] || die "--torch pypi needs python3"
  log "creating $VENV and installing torch from PyPI (pip install ${TORCH_PIP_ARGS:+$TORCH_PIP_ARGS }torch)"
  "$base" -m venv "$VENV" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  # shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of pip arguments
  "$VENV/bin/python" -m pip install ${TORCH_PIP_ARGS:-} torch >&2 || die "pip install torch failed"
}

case $TORCH in
  auto)
    if has_torch /usr/bin/python3; then PY=/usr/bin/python3
    elif command -v python3 >/dev/null 2>&1 && has_torch "$(command -v python3)"; then PY=$(command -v python3)
    else install_debian_torch; PY=/usr/bin/python3
    fi ;;
  debian)
    PY=/usr/bin/python3
    has_torch "$PY" || install_debian_torch ;;
  pypi)
    setup_pypi_torch; PY=$VENV/bin/python ;;
  *)
    PY=$TORCH
    command -v "$PY" >/dev/null 2>&1 || die "--torch: no Python interpreter '$PY'" ;;
esac
has_torch "$PY" || die "$PY cannot import torch"

# One line about the torch build: version, where from, its BLAS and oneDNN.
TORCH_INFO=$("$PY" - <<'EOF'
import os, re, torch
cfg = torch.__config__.show()
parts = []
for line in cfg.splitlines():
    line = line.strip().lstrip("- ")
    if line.startswith("Build settings:"):
        parts += re.findall(r"\b(?:BLAS_INFO|LAPACK_INFO|USE_MKLDNN|USE_OPENMP)=[^,\s]*", line)
    elif re.search(r"BLAS|MKL|oneDNN|oneAPI", line, re.I) and "usually provided" not in line:
        parts.append(line)
print(f"torch {torch.__version__} ({os.path.dirname(torch.__file__)}): " + "; ".join(parts))
EOF
) || die "$PY: could not read torch's configuration"
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [[ $TORCH_DIR == /usr/lib/python3/dist-packages/* ]]; then check_debian_blas; fi
ENV_NOTE=$(env | grep -E '^(OMP|GOMP|KMP|OPENBLAS|MKL|DNNL|ONEDNN)_[A-Z_]*=' | sort | tr '\n' ' ' || true)
log "$TORCH_INFO"
[[ -z $BLAS_NOTE ]] || log "$BLAS_NOTE"

# ---------------------------------------------------------------- helpers
# field LINE KEY: the value of KEY=value in a "result: k=v k=v" line.
field() { sed -n "s/.*[: ]$2=\([^ ]*\).*/\1/p" <<<"$1"; }
is_num() { [[ $1 =~ ^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$ ]]; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

RESULT=""
# run_one LABEL LOG CMD...: runs CMD with its output in LOG, sets RESULT to
# its last "result: " line. Returns 1 if CMD failed; exits if CMD succeeded
# but printed no usable result line (an incompatible binary or script).
run_one() {
  local label=$1 logf=$2 rc=0 tps
  shift 2
  log "$label: running $*"
  "$@" >"$logf" 2>&1 || rc=$?
  RESULT=$(grep '^result: ' "$logf" | tail -n1 || true)
  if [[ $rc -ne 0 ]]; then
    log "$label failed (exit status $rc); its last lines:"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    return 1
  fi
  tps=$(field "$RESULT" tokens_per_s)
  if [[ -z $RESULT ]] || ! is_num "$tps"; then
    log "$label: no line 'result: tokens_per_s=<f> step_ms=<f> gflops=<f> peak_rss_mib=<f> params=<n>'"
    log "  in the output of: $*"
    log "  (this script reads that line; a strata without it is too old). Its last lines:"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    die "no result line from: $*"
  fi
}

# ---------------------------------------------------------------- peak
PEAK_FP32="" PEAK_BF16="" PEAK_NOTE=""
peak_log="$WORK/peak.log"
log "strata bench peak"
if "$STRATA" bench peak >"$peak_log" 2>&1; then
  line=$(grep '^result: ' "$peak_log" | tail -n1 || true)
  PEAK_FP32=$(field "$line" fp32_gflops)
  PEAK_BF16=$(field "$line" bf16_gflops)
  if is_num "$PEAK_FP32" && gt "$PEAK_FP32" 0; then
    PEAK_NOTE="fp32 $PEAK_FP32 GFLOP/s, bf16 $PEAK_BF16 GFLOP/s, read $(field "$line" read_gbs) GB/s, $(field "$line" threads) threads"
    is_num "$PEAK_BF16" || PEAK_BF16=0
  else
    PEAK_FP32="" PEAK_BF16=""
    PEAK_NOTE="n/a (strata bench peak printed no 'result: fp32_gflops=...' line)"
  fi
else
  PEAK_NOTE="n/a (this strata has no working 'bench peak')"
fi
log "peak: $PEAK_NOTE"

# peak_for PRECISION: the GFLOP/s that "% of peak" divides by, or empty.
peak_for() {
  if [[ -z $PEAK_FP32 ]]; then return; fi
  if [[ $1 == bf16 ]] && gt "$PEAK_BF16" 0; then echo "$PEAK_BF16"; else echo "$PEAK_FP32"; fi
}

# ---------------------------------------------------------------- strata command
if "$STRATA" bench train --help >/dev/null 2>&1; then
  STRATA_BENCH=train
else
  STRATA_BENCH=model
  log "this strata has no 'bench train'; using 'bench model' with the same options"
fi

# ---------------------------------------------------------------- the rounds
# shellcheck disable=SC2034  # written through the namerefs in keep()
declare -A S_TPS S_MS S_GF S_RSS P_TPS P_MS P_GF P_RSS P_POLICY P_OTHER
FAILED=0
# keep ARRAY_PREFIX KEY: store RESULT as the best of its framework so far.
# shellcheck disable=SC2034
keep() {
  local -n tps_ref="${1}_TPS" ms_ref="${1}_MS" gf_ref="${1}_GF" rss_ref="${1}_RSS"
  local t
  t=$(field "$RESULT" tokens_per_s)
  if [[ -z ${tps_ref[$2]:-} ]] || gt "$t" "${tps_ref[$2]}"; then
    tps_ref[$2]=$t
    ms_ref[$2]=$(field "$RESULT" step_ms)
    gf_ref[$2]=$(field "$RESULT" gflops)
    rss_ref[$2]=$(field "$RESULT" peak_rss_mib)
  fi
}
show() { # show RESULT as "N tokens/s (M ms/step, R MiB)"
  printf '%s tokens/s (%s ms/step, %s GFLOP/s, peak RSS %s MiB)' "$(field "$RESULT" tokens_per_s)" \
    "$(field "$RESULT" step_ms)" "$(field "$RESULT" gflops)" "$(field "$RESULT" peak_rss_mib)"
}

for model in "${MODEL_LIST[@]}"; do
  for prec in "${PREC_LIST[@]}"; do
    key="$model/$prec"
    bf=()
    [[ $prec == bf16 ]] && bf=(--bf16)
    s_cmd=("$STRATA" bench "$STRATA_BENCH" --model "$model" --vocab "$VOCAB" --steps "$STEPS" "${bf[@]}")
    p_cmd=("$PY" "$PY_SCRIPT" --model "$model" --vocab "$VOCAB" --steps "$STEPS" "${bf[@]}" --threads "$NPROC")
    s_ok=1 p_ok=1 policy=""
    for ((r = 1; r <= ROUNDS; r++)); do
      tag="[$model $prec, round $r/$ROUNDS]"
      if ((s_ok)); then
        if run_one "$tag strata" "$WORK/strata-$model-$prec-$r.log" "${s_cmd[@]}"; then
          keep S "$key"
          log "$tag strata: $(show)"
        else
          s_ok=0 FAILED=1
        fi
      fi
      if ((p_ok)); then
        if [[ -z $policy ]]; then
          # Round 1: PyTorch under both wait policies; the faster one stays.
          t_default="" t_passive=""
          if run_one "$tag PyTorch (default OMP_WAIT_POLICY)" "$WORK/torch-$model-$prec-$r-default.log" \
              env -u OMP_WAIT_POLICY "${p_cmd[@]}"; then
            keep P "$key"; t_default=$(field "$RESULT" tokens_per_s)
            log "$tag PyTorch, default OMP_WAIT_POLICY: $(show)"
          fi
          if run_one "$tag PyTorch (OMP_WAIT_POLICY=PASSIVE)" "$WORK/torch-$model-$prec-$r-passive.log" \
              env OMP_WAIT_POLICY=PASSIVE "${p_cmd[@]}"; then
            keep P "$key"; t_passive=$(field "$RESULT" tokens_per_s)
            log "$tag PyTorch, OMP_WAIT_POLICY=PASSIVE: $(show)"
          fi
          if [[ -z $t_default && -z $t_passive ]]; then
            p_ok=0 FAILED=1
          elif [[ -z $t_default ]] || { [[ -n $t_passive ]] && gt "$t_passive" "$t_default"; }; then
            policy=PASSIVE; P_OTHER[$key]="default: ${t_default:-failed}"
          else
            policy=default; P_OTHER[$key]="PASSIVE: ${t_passive:-failed}"
          fi
          [[ -z $policy ]] || log "$tag PyTorch keeps OMP_WAIT_POLICY=$policy for the other rounds"
          P_POLICY[$key]=$policy
        else
          if [[ $policy == PASSIVE ]]; then env_cmd=(env OMP_WAIT_POLICY=PASSIVE)
          else env_cmd=(env -u OMP_WAIT_POLICY)
          fi
          if run_one "$tag PyTorch (OMP_WAIT_POLICY=$policy)" "$WORK/torch-$model-$prec-$r.log" \
              "${env_cmd[@]}" "${p_cmd[@]}"; then
            keep P "$key"
            log "$tag PyTorch: $(show)"
          else
            p_ok=0 FAILED=1
          fi
        fi
      fi
    done
  done
done

# ---------------------------------------------------------------- the report
model_name() { case $1 in 288) echo 6L-288 ;; 768) echo 12L-768 ;; 1024) echo 24L-1024 ;; *) echo "$1" ;; esac; }
pct() { # pct GFLOPS PRECISION
  local pk
  pk=$(peak_for "$2")
  if [[ -z $1 || -z $pk ]]; then echo n/a; else calc '%.1f%%' "100 * $1 / $pk"; fi
}
or_failed() { if [[ -n ${1:-} ]]; then echo "$1"; else echo failed; fi; }

REPORT="$WORK/report.md"
{
  echo "## strata against PyTorch"
  echo
  echo "- CPU: $CPU_MODEL; $CPU_ISA; $NPROC threads"
  echo "- peak (strata bench peak): $PEAK_NOTE"
  echo "- strata: $STRATA ($("$STRATA" --version 2>/dev/null | head -n1 || true)), \`strata bench $STRATA_BENCH --model M --vocab $VOCAB --steps $STEPS [--bf16]\`"
  echo "- PyTorch: $TORCH_INFO${BLAS_NOTE:+; $BLAS_NOTE}"
  echo "- PyTorch command: \`$PY bench/pytorch_train_step.py --model M --vocab $VOCAB --steps $STEPS [--bf16] --threads $NPROC\`"
  [[ -z $ENV_NOTE ]] || echo "- environment: ${ENV_NOTE% }"
  echo "- best of $ROUNDS interleaved rounds each; each run reports the median of $STEPS steps"
  echo
  echo "| model | precision | strata tokens/s | PyTorch tokens/s | ratio (strata/PyTorch) | strata % of peak | PyTorch % of peak | strata peak RSS MiB | PyTorch peak RSS MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for model in "${MODEL_LIST[@]}"; do
    for prec in "${PREC_LIST[@]}"; do
      key="$model/$prec"
      st=${S_TPS[$key]:-} pt=${P_TPS[$key]:-}
      ratio=n/a
      [[ -n $st && -n $pt ]] && ratio=$(calc '%.2fx' "$st / $pt")
      echo "| $(model_name "$model") | $prec | $(or_failed "$st") | $(or_failed "$pt") | $ratio" \
        "| $(pct "${S_GF[$key]:-}" "$prec") | $(pct "${P_GF[$key]:-}" "$prec")" \
        "| $(or_failed "${S_RSS[$key]:-}") | $(or_failed "${P_RSS[$key]:-}") |"
    done
  done
  echo
  echo "% of peak: model GFLOP/s (6 per weight per token, head included, plus causal attention)"
  echo "over the fp32 FMA peak for fp32 rows and the bf16 peak for bf16 rows (the fp32 peak"
  echo "where bf16 is not native)."
  for model in "${MODEL_LIST[@]}"; do
    for prec in "${PREC_LIST[@]}"; do
      key="$model/$prec"
      [[ -n ${P_POLICY[$key]:-} ]] &&
        echo "PyTorch $(model_name "$model") $prec: OMP_WAIT_POLICY=${P_POLICY[$key]} kept (round 1, ${P_OTHER[$key]} tokens/s)."
    done
  done
  echo
  echo "### targets"
  echo
  for model in "${MODEL_LIST[@]}"; do
    name=$(model_name "$model")
    for prec in "${PREC_LIST[@]}"; do
      key="$model/$prec"
      st=${S_TPS[$key]:-} pt=${P_TPS[$key]:-} sg=${S_GF[$key]:-}
      if [[ $prec == fp32 ]]; then
        if [[ -z $sg ]]; then
          echo "- $name fp32 >= 85% of the FMA peak: not checked (no strata result)"
        elif [[ -z $PEAK_FP32 ]]; then
          echo "- $name fp32 >= 85% of the FMA peak: not checked (no peak from strata bench peak; strata ran at $sg GFLOP/s)"
        else
          v=$(calc '%.1f' "100 * $sg / $PEAK_FP32")
          ge "$sg" "$(calc '%.6f' "0.85 * $PEAK_FP32")" && ok=met || ok="NOT met"
          echo "- $name fp32 >= 85% of the FMA peak: $ok ($v%: $sg of $PEAK_FP32 GFLOP/s)"
        fi
      fi
      if [[ -n $st && -n $pt ]]; then
        v=$(calc '%.2f' "$st / $pt")
        ge "$st" "$(calc '%.6f' "1.5 * $pt")" && ok=met || ok="NOT met"
        echo "- $name $prec >= 1.5x PyTorch: $ok (${v}x: $st vs $pt tokens/s)"
        sr=${S_RSS[$key]} pr=${P_RSS[$key]}
        gt "$sr" "$pr" && ok="NOT met" || ok=met
        echo "- $name $prec strata peak RSS <= PyTorch's: $ok ($sr vs $pr MiB)"
      else
        echo "- $name $prec >= 1.5x PyTorch and peak RSS <= PyTorch's: not checked (a run failed)"
      fi
    done
    if ((HAS_AMX_BF16)); then
      f=${S_MS[$model/fp32]:-} b=${S_MS[$model/bf16]:-}
      if [[ -n $f && -n $b ]]; then
        v=$(calc '%.2f' "$f / $b")
        ge "$f" "$(calc '%.6f' "3 * $b")" && ok=met || ok="NOT met"
        echo "- $name strata bf16 step >= 3x faster than fp32 (amx_bf16): $ok (${v}x: $b vs $f ms)"
      else
        echo "- $name strata bf16 step >= 3x faster than fp32 (amx_bf16): not checked (needs fp32 and bf16 runs)"
      fi
    fi
  done
} >"$REPORT"

cat "$REPORT"
if [[ -n $OUT ]]; then
  cp "$REPORT" "$OUT" || die "could not write --out '$OUT'"
  log "report written to $OUT"
fi
if ((FAILED)); then
  die "some runs failed (see above); their cells say 'failed'"
fi
