#!/usr/bin/env bash
# run.sh STAGE... -- on the GPU machine, from the repository root. Stages, in order:
#
#   carry N   move the carried .gpNN (a payload part) and .gpcarry folders out of the tree to
#             /tmp/parts and /tmp/gpcarry (the next call's carry replaces them in the tree)
#   setup     assemble + install vLLM (recipe's assemble.sh), the gateway's wheels, vllm-router;
#             convert the GGUF; record versions, the GPU and its power limits
#   up        `plumbline deploy vllm` two smollm2 replicas on GPU 0 (memory split, started one
#             after the other; REPLICAS=1: replica 0 alone, enough for the bench stage, which
#             measures against it), then `plumbline serve` in front of them; both left running
#   bench     `plumbline bench` router + promptopt: direct to replica 0, through the gateway and
#             through the bare relay (bench/floor_proxy.py --wire on :8403; with --late-head, its
#             head held until vLLM's first block as the gateway's is, on :8405), interleaved in
#             paired rounds (--rounds), vLLM's own histograms around each run (--server-metrics),
#             the gateway as GATEWAY_WORKERS (4) uvicorn workers on :8404 and with every route's
#             stream_head = "at_once" on :8406 (GATEWAY_AT_ONCE=1) when `up` started them;
#             BENCH_TARGETS picks some of them (gateway gateway-at-once floor floor-late
#             gateway-wN; e.g. "gateway": direct and the gateway alone, more rounds in the
#             same time); the paired comparison, intervals and verdicts in compare.md
#   perfsetup the gateway's runtime wheels and vllm-router from a carried .pcarry folder (wheels/,
#             router/), for the perf stage alone: no vLLM payload, no GGUF
#   perf      bench/gateway_perf.py on this machine's cores: direct, plumbline, vllm-router,
#             floor-wire against the fake upstream (the seed scenario and the looping ones);
#             PERF_TARGETS, PERF_SCENARIOS pick others, PERF_ARGS adds options (--text plain)
#   housekeeping  bench/housekeeping_latency.py on this machine's cores with HK_ARGS, one run a
#             store of HK_RUNS (default "sqlite;postgres"; e.g. "postgres;postgres --switch-ms 1");
#             PostgreSQL from the host's server binaries, else from a carried pgserver wheel
#             (.pcarry/pg/pgserver-*.whl, a relocatable build), run as a `postgres` user (initdb
#             refuses root); HK_SPLIT=1 runs them side by side, each pinned to its share of the
#             cores; needs perfsetup first
#   pair      `plumbline bench` router through the gateway over both replicas
#   eval      `plumbline eval run --suite smoke` through the gateway on the GPU replicas
#   ttft      bench/ttft_path.py against replica 0: where the time to first token goes inside the
#             gateway (both stream heads) and the bare relays, one request at a time; again with
#             the relay on a core of its own (TTFT_PIN, 15:14)
#   diag      where a slower stream through the gateway comes from: router C1 and C32, direct,
#             gateway and the bare relay (bench/floor_proxy.py --wire) interleaved over two
#             rounds, each cell with vLLM's own latency histograms around it
#             (--server-metrics: the srv_* columns); direct again beside a busy CPU; then vLLM, the
#             gateway and the load generator pinned to separate cores (lscpu's layout)
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
  for f in housekeeping.md env.txt bench.tsv bench.txt compare.md pair.txt gateway_perf.md gateway_perf.tsv eval.txt diag.txt diag.tsv lscpu.txt spy-gateway-c32.txt \
    ttft_path.md ttft_path_pinned.md; do
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
  # Tools carried beside the payload's parts (py-spy, for the diag stage).
  if compgen -G "/tmp/parts/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" /tmp/parts/*.whl \
      >> "$GPU_RUN/assemble.log" 2>&1 || return 1
  fi
  install_router "$CARRY"/router || return 1
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
  say "up: deploy vllm (${REPLICAS:-2} replica(s) on GPU 0)"
  : > "$GPU_RUN/empty.toml"; rm -f "$GPU_RUN/upstreams.toml"
  setsid bash -c "source '$HERE/env.sh'; plumbline deploy vllm --config '$GPU_RUN/empty.toml' \
    --profile smollm2 --gpus 0 --replicas-per-gpu ${REPLICAS:-2} --model /tmp/smollm2-hf \
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
  if [[ ${GATEWAY_WORKERS:-4} -gt 1 ]]; then  # the same routes as several workers, on :8404
    python3 "$HERE/gateway_config.py" "$GPU_RUN/upstreams.toml" "$GPU_RUN/gateway-w.toml" 8404 \
      > /dev/null || return 1
    setsid bash -c "source '$HERE/env.sh'; exec python3 -c 'from gateway.cli import app; app()' \
      serve --config '$GPU_RUN/gateway-w.toml' --workers ${GATEWAY_WORKERS:-4}" \
      > "$GPU_RUN/gateway-w.log" 2>&1 < /dev/null &
    echo $! > "$GPU_RUN/gateway-w.pid"
    wait_url http://127.0.0.1:8404/v1/models 90 "$(cat "$GPU_RUN/gateway-w.pid")" \
      || { say "gateway (workers) not up"; cat "$GPU_RUN/gateway-w.log"; return 1; }
    say "up: gateway as ${GATEWAY_WORKERS:-4} workers on :8404"
  fi
  if [[ ${GATEWAY_AT_ONCE:-1} == 1 ]]; then  # the same routes with stream_head = "at_once", on :8406
    python3 "$HERE/gateway_config.py" "$GPU_RUN/upstreams.toml" "$GPU_RUN/gateway-a.toml" 8406 at_once \
      > /dev/null || return 1
    setsid bash -c "source '$HERE/env.sh'; exec python3 -c 'from gateway.cli import app; app()' \
      serve --config '$GPU_RUN/gateway-a.toml'" > "$GPU_RUN/gateway-a.log" 2>&1 < /dev/null &
    echo $! > "$GPU_RUN/gateway-a.pid"
    wait_url http://127.0.0.1:8406/v1/models 60 "$(cat "$GPU_RUN/gateway-a.pid")" \
      || { say "gateway (at_once) not up"; cat "$GPU_RUN/gateway-a.log"; return 1; }
    say "up: gateway with stream_head = at_once on :8406"
  fi
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

start_floor() {  # the bare relay (bench/floor_proxy.py --wire: uvicorn + our wire) on :8403 -> replica 0,
  # and the same holding its head until vLLM's first block, as the gateway does, on :8405
  local name port extra started=
  for name in floor floor-late; do
    [[ -f $GPU_RUN/$name.pid ]] && kill -0 "$(cat "$GPU_RUN/$name.pid")" 2>/dev/null && continue
    port=8403 extra=
    [[ $name == floor-late ]] && port=8405 extra=--late-head
    setsid python3 bench/floor_proxy.py --upstream http://127.0.0.1:8401 --port $port --wire \
      $extra > "$GPU_RUN/$name.log" 2>&1 < /dev/null &
    echo $! > "$GPU_RUN/$name.pid"
    started=1
  done
  [[ -n $started ]] && sleep 4
  return 0
}

target_url() {  # target_url NAME: where a bench target listens (`up` and start_floor start them)
  case $1 in
    gateway) echo http://127.0.0.1:8400/v1 ;;
    floor) echo http://127.0.0.1:8403/v1 ;;
    gateway-w*) echo http://127.0.0.1:8404/v1 ;;
    floor-late) echo http://127.0.0.1:8405/v1 ;;
    gateway-at-once) echo http://127.0.0.1:8406/v1 ;;
    *) return 1 ;;
  esac
}

bench_targets() {  # the targets beside direct: BENCH_TARGETS as given, else all that are up
  local pid
  if [[ -n ${BENCH_TARGETS:-} ]]; then
    echo "$BENCH_TARGETS"
    return
  fi
  echo gateway floor floor-late
  pid=$GPU_RUN/gateway-a.pid
  [[ -f $pid ]] && kill -0 "$(cat "$pid")" 2>/dev/null && echo gateway-at-once
  pid=$GPU_RUN/gateway-w.pid
  [[ -f $pid ]] && kill -0 "$(cat "$pid")" 2>/dev/null && echo "gateway-w${GATEWAY_WORKERS:-4}"
}

stage_bench() {  # paired rounds per cell: direct and each target; vLLM's own histograms; verdicts
  # against BENCH_MIN_RATIO (0.99) and BENCH_MAX_TTFT_MS (+1 ms, drift out as well as raw)
  local s t url targets=() names
  names=$(echo $(bench_targets))  # one line, space-separated
  for t in $names; do
    url=$(target_url "$t") || { say "bench: unknown target $t"; return 1; }
    targets+=(--target "$t=$url")
  done
  [[ " $names " == *" floor"* ]] && start_floor
  for s in ${BENCH_SHAPES:-router promptopt}; do
    say "bench: $s, direct and $names interleaved over ${BENCH_ROUNDS:-6} rounds"
    bench_run bench.txt --target direct=http://127.0.0.1:8401/v1 "${targets[@]}" \
      --model smollm2 --shape "$s" --concurrency "${BENCH_C:-1,32}" \
      --prompts-per-slot "${BENCH_PPS:-8}" --rounds "${BENCH_ROUNDS:-6}" \
      --min-ratio "${BENCH_MIN_RATIO:-0.99}" --max-ttft-delta-ms "${BENCH_MAX_TTFT_MS:-1}" \
      --server-metrics "${METRICS_URL:-http://127.0.0.1:8401/metrics}" --compare-out "$GPU_RUN/compare.md"
  done
}

stage_pair() {
  say "pair: router through the gateway over both replicas"
  bench_run pair.txt --target gateway-pair=http://127.0.0.1:8400/v1 --model smollm2-pair \
    --shape router --concurrency "${PAIR_C:-256}" --prompts-per-slot "${BENCH_PPS:-4}"
}

install_router() {  # the vllm-router wheel(s) in $1 into /tmp/venvs/router, with a launcher
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/venvs/router/lib \
    "$1"/*.whl >> "$GPU_RUN/assemble.log" 2>&1 || return 1
  mkdir -p /tmp/venvs/router/bin
  printf '#!/bin/sh\nPYTHONPATH=/tmp/venvs/router/lib:$PYTHONPATH exec python3 -c "from vllm_router.launch_router import main; main()" "$@"\n' \
    > /tmp/venvs/router/bin/vllm-router
  chmod +x /tmp/venvs/router/bin/vllm-router
}

stage_perfsetup() {
  say "perfsetup: the gateway's wheels and vllm-router from .pcarry"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
    .pcarry/wheels/*.whl > "$GPU_RUN/assemble.log" 2>&1 || { tail -20 "$GPU_RUN/assemble.log"; return 1; }
  if [[ -d .pcarry/router ]]; then install_router .pcarry/router || return 1; fi
  { echo "# versions"; date -u +%FT%TZ; uname -r; nproc; free -g | head -2; python3 --version
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket'; } > "$GPU_RUN/env.txt" 2>&1
  cat "$GPU_RUN/env.txt"
}

stage_perf() {
  say "perf: gateway_perf.py on $(nproc) cores"
  python3 bench/gateway_perf.py --venvs /tmp/venvs --seconds "${PERF_SECONDS:-6}" \
    ${PERF_REPEAT:+--repeat $PERF_REPEAT} ${PERF_ARGS:-} \
    ${PERF_TARGETS:---target direct --target plumbline --target vllm-router --target floor-wire} \
    ${PERF_SCENARIOS:---scenario nonstream-c1 --scenario nonstream-c256 --scenario stream-c32 --scenario seed} \
    > "$GPU_RUN/gateway_perf.log" 2>&1
  local rc=$?
  cp bench/results/gateway_perf_summary.md "$GPU_RUN/gateway_perf.md" 2>/dev/null
  cp bench/results/gateway_perf_runs.tsv "$GPU_RUN/gateway_perf.tsv" 2>/dev/null
  tail -20 "$GPU_RUN/gateway_perf.log"
  return $rc
}

pg_from_wheel() {  # PostgreSQL's server binaries from the carried pgserver wheel, on PATH
  local whl; whl=$(ls .pcarry/pg/pgserver-*.whl 2>/dev/null | head -1)
  [[ -n $whl ]] || { say "no PostgreSQL server binaries here and no carried pgserver wheel"; return 1; }
  rm -rf /tmp/pg && mkdir -p /tmp/pg && python3 -m zipfile -e "$whl" /tmp/pg || return 1
  chmod -R a+rX /tmp/pg && chmod a+x /tmp/pg/pgserver/pginstall/bin/*
  export PATH=/tmp/pg/pgserver/pginstall/bin:$PATH
  if [[ $(id -u) == 0 ]] && ! id postgres > /dev/null 2>&1; then useradd -r -M postgres || return 1; fi
  postgres --version
}

stage_housekeeping() {
  # HK_RUNS: runs separated by ';', each a store and the bench's further options. HK_SPLIT=1: the
  # runs side by side, each pinned to its share of the cores. Each run's samples and the
  # gateway's log are kept (in logs.tgz).
  local n i=0 run db extra; n=$(nproc)
  local args=${HK_ARGS:---seconds 240 --interval 30 --hot-s 600 --expired-rate 3 --skip-s 5}
  local runs=() pids=() names=()
  IFS=';' read -r -a runs <<< "${HK_RUNS:-sqlite;postgres}"
  if [[ "${runs[*]}" == *postgres* ]] \
    && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null && ! command -v initdb > /dev/null; then
    pg_from_wheel || return 1
  fi
  local per=$((n / ${#runs[@]}))
  for run in "${runs[@]}"; do
    read -r db extra <<< "$run"
    local name="housekeeping-$i-$db" pin=()
    [[ ${HK_SPLIT:-0} == 1 ]] && pin=(taskset -c "$((i * per))-$((i * per + per - 1))")
    say "housekeeping $i: $db $args $extra ${pin[*]}"
    # shellcheck disable=SC2086
    "${pin[@]}" python3 bench/housekeeping_latency.py --db "$db" $args $extra \
      --out "$GPU_RUN/$name.md" --samples "$GPU_RUN/$name.samples.tsv" --log "$GPU_RUN/$name.gateway.log" \
      > "$GPU_RUN/$name.log" 2>&1 &
    pids+=($!) names+=("$name")
    [[ ${HK_SPLIT:-0} == 1 ]] || wait "${pids[-1]}"
    i=$((i + 1))
  done
  local rc=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { rc=1; say "${names[$i]} failed"; }
    tail -12 "$GPU_RUN/${names[$i]}.log"
  done
  cat "$GPU_RUN"/housekeeping-*.md > "$GPU_RUN/housekeeping.md" 2>/dev/null
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

stage_ttft() {
  say "ttft: the time to first token inside the relay, against replica 0"
  python3 bench/ttft_path.py --upstream http://127.0.0.1:8401/v1 --model smollm2 \
    --requests "${TTFT_REQUESTS:-200}" --out "$GPU_RUN/ttft_path.md" > "$GPU_RUN/ttft_path.log" 2>&1 \
    || { tail -20 "$GPU_RUN/ttft_path.log"; return 1; }
  python3 bench/ttft_path.py --upstream http://127.0.0.1:8401/v1 --model smollm2 \
    --requests "${TTFT_REQUESTS:-200}" --pin "${TTFT_PIN:-15:14}" --out "$GPU_RUN/ttft_path_pinned.md" \
    >> "$GPU_RUN/ttft_path.log" 2>&1 || { tail -20 "$GPU_RUN/ttft_path.log"; return 1; }
  cat "$GPU_RUN/ttft_path.md" "$GPU_RUN/ttft_path_pinned.md"
}

diag_cell() {  # diag_cell LABEL URL C PROMPTS_PER_SLOT [taskset CPUs for the load generator]
  local label=$1 url=$2 c=$3 pps=$4 pin=${5:-} gw c0
  gw=$(cat "$GPU_RUN/gateway.pid"); c0=$(cpu_of "$gw")
  COLUMNS=200 ${pin:+taskset -c $pin} python3 -c 'from gateway.cli import app; app()' bench \
    --target "$label=$url" --model smollm2 --shape router --concurrency "$c" \
    --prompts-per-slot "$pps" --tsv "$GPU_RUN/diag.tsv" --tokenizer-url http://127.0.0.1:8401 \
    --server-metrics "${METRICS_URL:-http://127.0.0.1:8401/metrics}" \
    2>&1 | grep -E "^$label " | tee -a "$GPU_RUN/diag.txt"
  echo "  gateway CPU: $(python3 -c "print(round($(cpu_of "$gw") - $c0, 3))") s" | tee -a "$GPU_RUN/diag.txt"
}

stage_diag() {
  say "diag: direct, gateway and the bare relay, interleaved, with vLLM's histograms"
  { lscpu; echo; lscpu -e; echo; ps -eo pid,psr,pcpu,rss,args --sort=-pcpu | head -25; } \
    > "$GPU_RUN/lscpu.txt" 2>&1
  start_floor
  local r t url
  for r in 1 2; do
    for t in direct gateway floor; do
      case $t in direct) url=http://127.0.0.1:8401/v1 ;; gateway) url=http://127.0.0.1:8400/v1 ;;
        floor) url=http://127.0.0.1:8403/v1 ;; esac
      diag_cell "$t-r$r" "$url" 1 "${DIAG_PPS1:-16}"
      if [[ $t == gateway && $r == 2 ]] && command -v py-spy > /dev/null; then
        py-spy record -p "$(cat "$GPU_RUN/gateway.pid")" -d 12 -r 250 -f raw --nonblocking \
          -o "$GPU_RUN/spy-gateway-c32.txt" > "$GPU_RUN/spy.log" 2>&1 &
      fi
      diag_cell "$t-r$r" "$url" 32 "${DIAG_PPS32:-4}"
    done
  done
  say "diag: direct beside one busy CPU"
  python3 -c 'while True: pass' & local burn=$!
  diag_cell direct-burn http://127.0.0.1:8401/v1 1 "${DIAG_PPS1:-16}"
  diag_cell direct-burn http://127.0.0.1:8401/v1 32 "${DIAG_PPS32:-4}"
  kill $burn
  say "diag: pinned (vLLM, gateway, load generator on separate cores)"
  local n; n=$(nproc)
  local vcpus="0-$((n - 5))" gcpus="$((n - 4))-$((n - 3))" lcpus="$((n - 2))-$((n - 1))" p
  for p in $(pgrep -f "vllm|VLLM|EngineCore"); do taskset -a -cp "$vcpus" "$p" > /dev/null 2>&1; done
  taskset -a -cp "$gcpus" "$(cat "$GPU_RUN/gateway.pid")" > /dev/null 2>&1
  echo "pinned: vLLM $vcpus, gateway $gcpus, load generator $lcpus" | tee -a "$GPU_RUN/diag.txt"
  ps -eLo pid,psr,comm | awk 'NR==1 || /python|VLLM|vllm/' | sort -u -k3 | head -30 >> "$GPU_RUN/lscpu.txt"
  for t in direct gateway; do
    url=http://127.0.0.1:8401/v1; [[ $t == gateway ]] && url=http://127.0.0.1:8400/v1
    diag_cell "$t-pin" "$url" 1 "${DIAG_PPS1:-16}" "$lcpus"
    diag_cell "$t-pin" "$url" 32 "${DIAG_PPS32:-4}" "$lcpus"
  done
}

rc=0
while [[ $# -gt 0 ]]; do
  stage=$1; shift
  case $stage in
    carry) stage_carry || rc=1 ;;
    setup|perfsetup|up|gateway|bench|pair|perf|housekeeping|eval|diag|ttft) "stage_$stage" || { rc=1; say "stage $stage failed"; break; } ;;
    *) echo "unknown stage $stage" >&2; rc=2; break ;;
  esac
done
say "done rc=$rc"
exit $rc
