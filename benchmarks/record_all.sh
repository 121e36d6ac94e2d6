#!/usr/bin/env bash
# Rerun the benchmarks whose figures the README and docs/benchmarks.md show, recording each in
# benchmarks/results/NAME.json (benchmarks/record.py), then re-render those figures:
#   bash benchmarks/record_all.sh             # the ones that take seconds to a few minutes each
#   bash benchmarks/record_all.sh --long      # also the learning runs (tens of minutes each)
#   bash benchmarks/record_all.sh mcqa math   # only these records
# Needs what the suite needs (scripts/setup.sh; as root for the container ones: scripts/ci_podman.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
declare -A CMD=(
  [mcqa]="benchmarks/env_throughput.py --env mcqa --concurrency 64 --requests 20000"
  [math]="benchmarks/env_throughput.py --env math --concurrency 64 --requests 5000"
  [instruction_following]="benchmarks/env_throughput.py --env instruction_following --concurrency 64 --requests 10000"
  [structured_outputs]="benchmarks/env_throughput.py --env structured_outputs --concurrency 64 --requests 10000"
  [calendar]="benchmarks/env_throughput.py --env calendar --concurrency 64 --requests 10000"
  [next_action]="benchmarks/env_throughput.py --env next_action --concurrency 64 --requests 10000"
  [workplace_sessions]="benchmarks/workplace_sessions.py --sessions 3000"
  [sandbox_exec]="benchmarks/sandbox_exec.py -n 200 --rounds 5"
  [code_env]="benchmarks/code_env.py --concurrency 32 --requests 96"
  [swe_grading]="benchmarks/swe_grading.py --grades 6"
  [data_prep]="benchmarks/data_prep.py --rows 100000"
  [judge_throughput]="benchmarks/judge_throughput.py"
  [genrm_compare]="benchmarks/genrm_compare.py --groups 40"
  [fleet_startup]="benchmarks/fleet_startup.py"
  [verify_cost]="benchmarks/verify_cost.py --envs mcqa,instruction_following,structured_outputs,math --traffic unique,repeated"
  [connections]="benchmarks/connections.py"
  [async_vs_sync]="benchmarks/async_vs_sync.py --steps 20"
  [engine_overhead]="benchmarks/engine_overhead.py --steps 8"
)
declare -A LONG=(
  [adversarial]="benchmarks/adversarial.py --base a2cc578 --requests 9000 --repeats 2"  # a2cc578: main before issue 26
  [tiny_learning]="benchmarks/tiny_learning.py --parallel 1"
  [tiny_tools_learning]="benchmarks/tiny_tools_learning.py --seeds 2 0 1"
  [dpo_hallucination]="benchmarks/dpo_hallucination.py"
)
ORDER=(mcqa math instruction_following structured_outputs calendar next_action workplace_sessions sandbox_exec
       code_env swe_grading data_prep judge_throughput genrm_compare fleet_startup verify_cost connections async_vs_sync
       engine_overhead)
names=()
if [[ "${1:-}" == "--long" ]]; then names=("${ORDER[@]}" "${!LONG[@]}"); shift
elif [[ $# -gt 0 ]]; then names=("$@")
else names=("${ORDER[@]}"); fi
failed=0
for name in "${names[@]}"; do
  cmd=${CMD[$name]:-${LONG[$name]:-}}
  [[ -n $cmd ]] || { echo "record_all: no benchmark named $name" >&2; failed=1; continue; }
  echo "== $name: $cmd" >&2
  # shellcheck disable=SC2086
  $PY benchmarks/record.py "$name" -- "$PY" $cmd || failed=1
done
$PY benchmarks/report.py --write
exit $failed
