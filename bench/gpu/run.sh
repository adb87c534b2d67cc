#!/usr/bin/env bash
# run.sh STAGE... -- on the GPU machine, from the repository root. Stages, in order:
#
#   carry N   move the carried .gpNN (a payload part) and .gpcarry folders out of the tree to
#             /tmp/parts and /tmp/gpcarry (the next call's carry replaces them in the tree)
#   setup     assemble + install vLLM (recipe's assemble.sh), the gateway's wheels, vllm-router;
#             convert the GGUF; record versions, the GPU and its power limits
#   up        `plumbline deploy vllm` two smollm2 replicas on GPU 0 (memory split, started one
#             after the other), then `plumbline serve` in front of them; both left running
#   bench     `plumbline bench` router + promptopt, direct to replica 0 and through the gateway
#   perf      bench/gateway_perf.py on this machine's cores: direct, plumbline, vllm-router,
#             floor-wire against the fake upstream (the seed scenario and the looping ones)
#   pair      `plumbline bench` router through the gateway over both replicas
#   eval      `plumbline eval run --suite smoke` through the gateway on the GPU replicas
#
# Everything is written under $GPU_RUN (/tmp/gpurun); on exit the results and a tarball of the
# logs go to $OUT (at most 8 files come back). Processes are started with setsid so the replicas
# and the gateway outlive this call while the machine stays warm.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
mkdir -p "$GPU_RUN" "${OUT:=/tmp/gpuout}"
LOG=$GPU_RUN/run.log
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
collect() {
  cp "$LOG" "$OUT/run.log" 2>/dev/null
  for f in env.txt bench.tsv bench.txt pair.txt gateway_perf.md eval.txt; do
    [[ -f $GPU_RUN/$f ]] && cp "$GPU_RUN/$f" "$OUT/"
  done
  tar -czf "$OUT/logs.tgz" -C / --ignore-failed-read "${GPU_RUN#/}" \
    "$(realpath --relative-to=/ var/engines 2>/dev/null || echo var/engines)" 2>/dev/null
  ls -la "$OUT"
}
trap collect EXIT
wait_url() {  # wait_url URL SECONDS PID
  local i
  for ((i = 0; i < $2; i++)); do
    curl -sf "$1" > /dev/null && return 0
    [[ -n ${3:-} ]] && ! kill -0 "$3" 2>/dev/null && return 1
    sleep 1
  done
  return 1
}
cpu_of() { python3 -c "import sys; sys.path.insert(0, 'bench'); from perf_procs import cpu_seconds; print(cpu_seconds(int(sys.argv[1])))" "$1"; }

stage_carry() {
  mkdir -p /tmp/parts
  for d in .gp[0-9]*; do [[ -d $d ]] && mv "$d"/* /tmp/parts/; done
  if [[ -d .gpcarry ]]; then rm -rf "$CARRY"; cp -r .gpcarry "$CARRY"; fi
  ls /tmp/parts | tr '\n' ' '; echo; ls "$CARRY" 2>/dev/null | tr '\n' ' '; echo
}

stage_setup() {
  say "setup: assemble"
  bash "$CARRY/recipe/assemble.sh" /tmp/parts --site "$SITE" > "$GPU_RUN/assemble.log" 2>&1 \
    || { tail -30 "$GPU_RUN/assemble.log"; return 1; }
  tail -3 "$GPU_RUN/assemble.log"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$CARRY"/wheels/*.whl >> "$GPU_RUN/assemble.log" 2>&1 || return 1
  cp -r "$CARRY"/pysite/* "$SITE"/
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/venvs/router/lib \
    "$CARRY"/router/*.whl >> "$GPU_RUN/assemble.log" 2>&1 || return 1
  mkdir -p /tmp/venvs/router/bin
  printf '#!/bin/sh\nPYTHONPATH=/tmp/venvs/router/lib:$PYTHONPATH exec python3 -c "from vllm_router.launch_router import main; main()" "$@"\n' \
    > /tmp/venvs/router/bin/vllm-router
  chmod +x /tmp/venvs/router/bin/vllm-router
  say "setup: convert GGUF"
  [[ -f /tmp/smollm2-hf/config.json ]] || python3 "$CARRY/recipe/convert_gguf.py" "" /tmp/smollm2-hf \
    > "$GPU_RUN/convert.log" 2>&1 || { tail -20 "$GPU_RUN/convert.log"; return 1; }
  {
    echo "# versions"; date -u +%FT%TZ; uname -r; nproc; free -g | head -2
    python3 -c 'import sys, torch, vllm, transformers, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()); print("vllm", vllm.__version__, "transformers", transformers.__version__, "triton", triton.__version__); print("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
    nvcc --version | tail -2
    python3 -m pip show flashinfer-python fastapi uvicorn 2>/dev/null | grep -E '^(Name|Version)'
    echo "# nvidia-smi"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit,power.max_limit,power.default_limit,clocks.max.sm,clocks.max.mem --format=csv
    nvidia-smi | head -12
    echo "# deploy.gpu.check_power_limits"
    python3 -c 'from deploy.gpu import query_power; [print(g, "capped" if g.capped else "full power") for g in query_power()]'
  } > "$GPU_RUN/env.txt" 2>&1
  cat "$GPU_RUN/env.txt"
}

stage_up() {
  say "up: deploy vllm (2 replicas on GPU 0)"
  : > "$GPU_RUN/empty.toml"; rm -f "$GPU_RUN/upstreams.toml"
  setsid bash -c "source '$HERE/env.sh'; plumbline deploy vllm --config '$GPU_RUN/empty.toml' \
    --profile smollm2 --gpus 0 --replicas-per-gpu 2 --model /tmp/smollm2-hf \
    --served-model-name smollm2 --register '$GPU_RUN/upstreams.toml' --allow-power-capped \
    --timeout-s ${DEPLOY_TIMEOUT_S:-420}" > "$GPU_RUN/deploy.log" 2>&1 < /dev/null &
  local pid=$! i
  echo $pid > "$GPU_RUN/deploy.pid"
  for ((i = 0; i < ${DEPLOY_TIMEOUT_S:-420} + 30; i++)); do
    grep -q "registered" "$GPU_RUN/deploy.log" && break
    kill -0 $pid 2>/dev/null || { say "deploy exited"; tail -60 "$GPU_RUN/deploy.log"; return 1; }
    sleep 1
  done
  cat "$GPU_RUN/deploy.log"
  grep -q "registered" "$GPU_RUN/deploy.log" || return 1
  say "up: replicas healthy"
  { echo "# kernels and argv, as deploy recorded them"; cat var/engines/*.json; } >> "$GPU_RUN/env.txt"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$GPU_RUN/env.txt"
  stage_gateway
}

stage_gateway() {  # the gateway in front of the replicas in $GPU_RUN/upstreams.toml
  python3 "$HERE/gateway_config.py" "$GPU_RUN/upstreams.toml" "$GPU_RUN/gateway.toml" 8400 || return 1
  setsid bash -c "source '$HERE/env.sh'; exec python3 -c 'from gateway.cli import app; app()' \
    serve --config '$GPU_RUN/gateway.toml'" > "$GPU_RUN/gateway.log" 2>&1 < /dev/null &
  echo $! > "$GPU_RUN/gateway.pid"
  wait_url http://127.0.0.1:8400/v1/models 60 "$(cat "$GPU_RUN/gateway.pid")" \
    || { say "gateway not up"; cat "$GPU_RUN/gateway.log"; return 1; }
  say "up: gateway on :8400"
  curl -s http://127.0.0.1:8400/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"smollm2-eval","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":24}'
  echo
}

bench_run() {  # bench_run OUTFILE ARGS...
  local out=$1; shift
  local gw; gw=$(cat "$GPU_RUN/gateway.pid")
  local c0; c0=$(cpu_of "$gw")
  nvidia-smi dmon -s u -d 1 > "$GPU_RUN/dmon-$(basename "$out" .txt).log" 2>&1 &
  local dmon=$!
  COLUMNS=200 plumbline bench "$@" --tsv "$GPU_RUN/bench.tsv" \
    --tokenizer-url http://127.0.0.1:8401 2>&1 | tee -a "$GPU_RUN/$out"
  kill $dmon 2>/dev/null
  echo "gateway process tree CPU during this bench: $(python3 -c "print(round($(cpu_of "$gw") - $c0, 2))") s" \
    | tee -a "$GPU_RUN/$out"
}

stage_bench() {
  local shapes=() s
  for s in ${BENCH_SHAPES:-router promptopt}; do shapes+=(--shape "$s"); done
  say "bench: ${BENCH_SHAPES:-router promptopt}, direct and through the gateway"
  bench_run bench.txt --target direct=http://127.0.0.1:8401/v1 \
    --target gateway=http://127.0.0.1:8400/v1 --model smollm2 "${shapes[@]}" \
    --concurrency "${BENCH_C:-1,32,256}" --prompts-per-slot "${BENCH_PPS:-4}"
}

stage_pair() {
  say "pair: router through the gateway over both replicas"
  bench_run pair.txt --target gateway-pair=http://127.0.0.1:8400/v1 --model smollm2-pair \
    --shape router --concurrency "${PAIR_C:-256}" --prompts-per-slot "${BENCH_PPS:-4}"
}

stage_perf() {
  say "perf: gateway_perf.py on $(nproc) cores"
  python3 bench/gateway_perf.py --venvs /tmp/venvs --seconds "${PERF_SECONDS:-6}" \
    --target direct --target plumbline --target vllm-router --target floor-wire \
    ${PERF_SCENARIOS:---scenario nonstream-c1 --scenario nonstream-c256 --scenario stream-c32 --scenario seed} \
    > "$GPU_RUN/gateway_perf.log" 2>&1
  local rc=$?
  cp bench/results/gateway_perf.md "$GPU_RUN/gateway_perf.md" 2>/dev/null
  cp bench/results/gateway_perf.tsv "$GPU_RUN/gateway_perf.tsv" 2>/dev/null
  tail -20 "$GPU_RUN/gateway_perf.log"
  return $rc
}

stage_eval() {
  say "eval: smoke suite through the gateway"
  plumbline eval run -t smollm2-eval --suite smoke --base-url http://127.0.0.1:8400/v1 \
    --concurrency 16 --timeout 240 --runs-dir "$GPU_RUN/evals" 2>&1 | tee "$GPU_RUN/eval.txt"
  local run; run=$(ls -t "$GPU_RUN/evals" | head -1)
  [[ -n $run ]] || return 1
  plumbline eval report "$run" --runs-dir "$GPU_RUN/evals" --out "$GPU_RUN/evalreport" \
    --config "$GPU_RUN/gateway.toml" >> "$GPU_RUN/eval.txt" 2>&1
  { echo "# report.md"; cat "$GPU_RUN/evalreport/report.md"; echo "# run.json"
    cat "$GPU_RUN/evals/$run/run.json"; } >> "$GPU_RUN/eval.txt" 2>&1
  grep -A3 -i fingerprint "$GPU_RUN/evals/$run/run.json" | head -20
}

rc=0
while [[ $# -gt 0 ]]; do
  stage=$1; shift
  case $stage in
    carry) stage_carry || rc=1 ;;
    setup|up|gateway|bench|pair|perf|eval) "stage_$stage" || { rc=1; say "stage $stage failed"; break; } ;;
    *) echo "unknown stage $stage" >&2; rc=2; break ;;
  esac
done
say "done rc=$rc"
exit $rc
