#!/usr/bin/env bash
# Device-side driver behind bench/results/h200-eval-cost-split-20261202.json (where one mlx-cuda candidate
# evaluation's wall time goes, on the H200). Run from the repository root on the device machine.
#   start    machine facts, an LD_PRELOAD shim that times every NVRTC compile and CUDA module load
#            (lines "ksearch-shim: ..." on the worker's stderr, so in `ksearch -vv`), a check of the shim on
#            MLX custom kernels, then the queue of searches started in the background (setsid), so that it
#            outlives one device call (10 min at most)
#   collect S  wait up to S seconds for the queue, then pack every log into $OUT/h200cost.tgz
# The queue: each search is `ksearch -vv run TASK --target mlx-cuda --strategy tune --budget 3 --checks 1
# --seed expert` with KSEARCH_WORKER_PROFILE (cProfile of each prepare and run), stopped as soon as the
# search phase is over (the final phase's held-out workloads and the confirm pass are not wanted here).
set -u
W=${H200COST_DIR:-/root/h200cost}
mode=${1:-collect}

shim_source() {
cat <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double mono(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double wall(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define SLOTS 256
static void *progs[SLOTS];
static char names[SLOTS][160];
static size_t srclen[SLOTS];
static int next_slot;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void emit(const char *line) { ssize_t r = write(2, line, strlen(line)); (void)r; }
/* The real function: RTLD_NEXT misses libraries Python loaded with RTLD_LOCAL (libmlx and what it needs), so
   the already loaded library is asked by its soname. */
static void *real_fn(const char *lib, const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) { void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); if (!h) h = dlopen(lib, RTLD_NOW); if (h) f = dlsym(h, name); }
  if (!f) { emit("ksearch-shim: cannot find the real function\n"); _exit(97); }
  return f;
}
typedef int (*create_t)(void **, const char *, const char *, int, const char *const *, const char *const *);
int nvrtcCreateProgram(void **prog, const char *src, const char *name, int nh, const char *const *h, const char *const *inc) {
  static create_t real;
  if (!real) real = (create_t)real_fn("libnvrtc.so.13", "nvrtcCreateProgram");
  int rc = real(prog, src, name, nh, h, inc);
  if (rc == 0 && prog) {
    pthread_mutex_lock(&mu);
    int s = next_slot++ % SLOTS;
    progs[s] = *prog;
    snprintf(names[s], sizeof names[s], "%s", name ? name : "?");
    srclen[s] = src ? strlen(src) : 0;
    pthread_mutex_unlock(&mu);
  }
  return rc;
}
typedef int (*compile_t)(void *, int, const char *const *);
int nvrtcCompileProgram(void *prog, int n, const char *const *opts) {
  static compile_t real;
  if (!real) real = (compile_t)real_fn("libnvrtc.so.13", "nvrtcCompileProgram");
  double w = wall(), t = mono();
  int rc = real(prog, n, opts);
  double dt = mono() - t;
  char name[160] = "?";
  size_t len = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++)
    if (progs[i] == prog) { snprintf(name, sizeof name, "%s", names[i]); len = srclen[i]; }
  pthread_mutex_unlock(&mu);
  char line[400];
  snprintf(line, sizeof line, "ksearch-shim: nvrtc %s %zu %.6f %.6f %d\n", name, len, w, dt, rc);
  emit(line);
  return rc;
}
typedef int (*load_t)(void *, const void *, unsigned int, void *, void **);
int cuModuleLoadDataEx(void *module, const void *image, unsigned int n, void *opts, void **vals) {
  static load_t real;
  if (!real) real = (load_t)real_fn("libcuda.so.1", "cuModuleLoadDataEx");
  double w = wall(), t = mono();
  int rc = real(module, image, n, opts, vals);
  char line[200];
  snprintf(line, sizeof line, "ksearch-shim: modload %.6f %.6f %d\n", w, mono() - t, rc);
  emit(line);
  return rc;
}
C
}

# The queue: NAME TASK LIMIT_S PROFILE_TOP [extra ksearch run flags]
queue_list() {
cat <<'Q'
ssd-default ssd 330 60
attention-default attention 450 60
mamba-default mamba-scan 300 60
mamba-tb0.1 mamba-scan 240 60 --timing-budget 0.1
ssd-tb0.1 ssd 240 60 --timing-budget 0.1
mamba-default-noprof mamba-scan 240 0
attention-tb0.1 attention 300 60 --timing-budget 0.1
Q
}

run_one() {
  local name=$1 task=$2 limit=$3 prof=$4; shift 4
  local S=$W/store-$name L=$W/logs/$name
  mkdir -p "$S"
  local info nw held
  info=$(python3 -c "import tomllib,sys; w=tomllib.load(open('$W/tasks/$task/task.toml','rb'))['workload']; print(sum(1 for x in w if not x.get('held_out')), '|'.join(x['name'] for x in w if x.get('held_out')) or 'NONE')")
  nw=${info%% *}; held=${info#* }
  echo "$(date +%s.%N) start $name task=$task limit=$limit profile=$prof search_workloads=$nw held=$held extra=$*" >> $W/logs/events
  local -a envs=(LD_PRELOAD=$W/shim.so)
  [ -f $W/shim.so ] || envs=()
  [ "$prof" != 0 ] && envs+=(KSEARCH_WORKER_PROFILE=$prof)
  echo "env ${envs[*]} timeout $limit ksearch -vv --python python3 --store STORE run $task --target mlx-cuda --strategy tune --budget 3 --checks 1 --seed expert $* --json" > $L.cmd
  local t0=$(date +%s.%N)
  env "${envs[@]}" timeout "$limit" $W/ksearch -vv --python python3 --store "$S" run "$task" --target mlx-cuda \
    --strategy tune --budget 3 --checks 1 --seed expert "$@" --json > $L.stdout 2> $L.stderr &
  local tpid=$! why=finished
  while kill -0 $tpid 2>/dev/null; do
    sleep 0.5
    local n
    n=$(grep -c "ksearch-worker: run " $L.stderr)
    if [ "$n" -ge $((3 * nw)) ] || grep -qE "ksearch-worker: prepare ($held) " $L.stderr; then
      why="stopped at the end of the search phase (run lines: $n)"
      local kp wp
      kp=$(ps -o pid= --ppid $tpid | tr -d ' ')
      wp=$(for p in $kp; do ps -o pid= --ppid $p; done | tr -d ' ')
      sleep 1.5
      kill -TERM $tpid 2>/dev/null
      sleep 3
      for p in $kp $wp; do kill -KILL $p 2>/dev/null; done
      break
    fi
  done
  wait $tpid 2>/dev/null; local rc=$?
  local t1=$(date +%s.%N)
  echo "$(date +%s.%N) end $name rc=$rc wall=$(python3 -c "print(round($t1-$t0,2))") $why" >> $W/logs/events
  $W/ksearch --store "$S" runs --json > $L.runs.json 2>>$L.stderr-show
  local id
  id=$(python3 -c "import json; r=json.load(open('$L.runs.json')); print(r[0]['run_id'] if r else '')" 2>/dev/null)
  [ -n "$id" ] && $W/ksearch --store "$S" show "$id" --json > $L.show.json 2>>$L.stderr-show
}

if [ "$mode" = start ]; then
  rm -rf $W; mkdir -p $W/logs
  source bench/device_bin.sh
  cp "$bin" $W/ksearch
  cp -r tasks $W/tasks
  cp "$0" $W/driver.sh
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,temperature.gpu,power.draw --format=csv
    nvidia-smi -q | grep -iE "CUDA Version|Persistence|Compute Mode|MIG Mode" | head
    python3 -c "import mlx.core as mx, sys; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available(), 'python', sys.version.split()[0])"
    nproc; free -g | head -2
    $W/ksearch --version
  } > $W/logs/machine.txt 2>&1
  shim_source > $W/shim.c
  (cc -O2 -shared -fPIC -o $W/shim.so $W/shim.c -ldl || gcc -O2 -shared -fPIC -o $W/shim.so $W/shim.c -ldl) > $W/logs/shim-build.txt 2>&1 \
    || rm -f $W/shim.so
  # The shim on MLX itself: three distinct custom kernels (each its own NVRTC module), each evaluated twice.
  LD_PRELOAD=$W/shim.so timeout 120 python3 - > $W/logs/shim-check.txt 2>&1 <<'PY'
import time, mlx.core as mx
x = mx.random.uniform(shape=(1 << 20,)); mx.eval(x)
for i in range(3):
    k = mx.fast.cuda_kernel(name=f"probe{i}", input_names=["x"], output_names=["y"],
                            source=f"int j = blockIdx.x * blockDim.x + threadIdx.x; y[j] = x[j] * {i + 2}.0f;")
    for rep in range(2):
        t0 = time.perf_counter()
        (y,) = k(inputs=[x], output_shapes=[x.shape], output_dtypes=[mx.float32], grid=(1 << 20, 1, 1), threadgroup=(256, 1, 1))
        mx.eval(y); mx.synchronize()
        print(f"probe{i} eval {rep}: {time.perf_counter() - t0:.4f} s", flush=True)
PY
  setsid nohup bash $W/driver.sh queue > $W/logs/queue.log 2>&1 < /dev/null &
  echo "started queue"; cat $W/logs/machine.txt $W/logs/shim-build.txt $W/logs/shim-check.txt
  exit 0
fi

if [ "$mode" = queue ]; then
  export PYTHONPATH=/root/mlx-site
  queue_list | while read -r name task limit prof extra; do
    [ -f $W/STOP ] && break
    # shellcheck disable=SC2086
    run_one "$name" "$task" "$limit" "$prof" $extra
  done
  echo "$(date +%s.%N) queue done" >> $W/logs/events
  exit 0
fi

# collect S
wait_s=${2:-0}
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "$wait_s" ] && ! grep -q "queue done" $W/logs/events 2>/dev/null; do sleep 2; done
[ "${3:-}" = stop ] && touch $W/STOP
cd $W && tar czf "$OUT/h200cost.tgz" logs
cat $W/logs/events
for f in $W/logs/*.stderr; do
  echo "== $(basename $f): $(grep -c 'ksearch-worker: run ' $f) run lines, $(grep -c 'ksearch-shim: nvrtc' $f) nvrtc"
  grep -E "ksearch-worker: (run|prepare|compile_mlx) " $f | sed -E 's/.*ksearch-worker: //' | tail -n 4 | cut -c1-220
done
