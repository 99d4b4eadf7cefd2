#!/usr/bin/env bash
# capture's GPU bundle (made by `cargo xtask gpu-bundle`, from xtask/gpu/run.sh): runs the
# prebuilt tests and demos on this machine, CUDA required. Ends with
# `bundle: N passed, M failed`, and exits non-zero when anything failed. See README.txt.
#
# usage: ./run.sh [--logs DIR] [--archive FILE] [--step-timeout SECONDS] [--short]
#                 [--no-vulkan] [--driver-model]
#   --logs DIR            one log file per step in DIR (default: logs/ beside run.sh),
#                         named NN-step.log, and summary.txt; the console shows each
#                         step's output too
#   --archive FILE        after every step, DIR's logs as one gzipped tar FILE (written
#                         whole, then renamed), so a run cut short still leaves every
#                         finished step's whole log in one file
#   --step-timeout S      a step still running after S seconds is killed and fails
#                         (default 240: a cold GPU machine's first CUDA call loads the
#                         driver and JIT-compiles the PTX; a hung call still cannot eat
#                         a short device window)
#   --short               the benchmark's first launch-bound row and its fork, update,
#                         decode and until rows, few passes
#   --no-vulkan           skip every Vulkan step
#   --driver-model        the CUDA driver found must be capture's CUDA driver model (the
#                         test command runs this script on it); without this option,
#                         finding the model instead of a GPU's driver fails the run
#
# What differs from one bundle to the next is not in this script: it is read from
# bundle.env beside it, which `cargo xtask gpu-bundle` writes:
#   SOURCE_SNAPSHOTS  the snapshot directory compiled into capture-suite-mock (the build
#                     machine's crates/capture-suite/snapshots)
#   SOURCE_TREE_TEST  the capture-suite-mock test that reads that directory
#   NO_CUDA_DEMO      why the CUDA demo is skipped (the capture program was built without
#                     CUDA); empty when it runs
cd "$(dirname "$0")" || exit 2
if [ ! -r ./bundle.env ]; then
    echo "run.sh: no bundle.env beside it: run the run.sh of a bundle (cargo xtask gpu-bundle)"
    exit 2
fi
SOURCE_SNAPSHOTS="" SOURCE_TREE_TEST="" NO_CUDA_DEMO=""
# shellcheck source=/dev/null
. ./bundle.env
if [ -z "$SOURCE_TREE_TEST" ]; then
    echo "run.sh: bundle.env sets no SOURCE_TREE_TEST"
    exit 2
fi

LOG_DIR="$PWD/logs"
STEP_TIMEOUT=240
ARCHIVE=""
SHORT=0
VULKAN_WANTED=1
DRIVER_MODEL=0
while [ $# -gt 0 ]; do
    case "$1" in
    --logs)
        [ $# -ge 2 ] || { echo "run.sh: --logs needs a directory"; exit 2; }
        LOG_DIR=$2
        shift 2
        ;;
    --archive)
        [ $# -ge 2 ] || { echo "run.sh: --archive needs a file"; exit 2; }
        ARCHIVE=$2
        shift 2
        ;;
    --step-timeout)
        [ $# -ge 2 ] && [ "$2" -gt 0 ] 2>/dev/null || {
            echo "run.sh: --step-timeout needs a number of seconds"
            exit 2
        }
        STEP_TIMEOUT=$2
        shift 2
        ;;
    --short) SHORT=1; shift ;;
    --no-vulkan) VULKAN_WANTED=0; shift ;;
    --driver-model) DRIVER_MODEL=1; shift ;;
    -h | --help)
        sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "run.sh: unknown option $1 (see ./run.sh --help)"
        exit 2
        ;;
    esac
done
mkdir -p "$LOG_DIR" || { echo "run.sh: cannot create $LOG_DIR"; exit 2; }
LOG_DIR=$(cd "$LOG_DIR" && pwd)
if [ -n "$ARCHIVE" ]; then
    archive_dir=$(dirname "$ARCHIVE")
    mkdir -p "$archive_dir" || { echo "run.sh: cannot create $archive_dir"; exit 2; }
    ARCHIVE="$(cd "$archive_dir" && pwd)/$(basename "$ARCHIVE")"
fi

export CAPTURE_SNAPSHOTS="$PWD/snapshots" INSTA_WORKSPACE_ROOT="$PWD" INSTA_UPDATE=no \
    CI=true CAPTURE_REQUIRE_CUDA=1 LP_NUM_THREADS=0
if [ "$DRIVER_MODEL" = 1 ]; then
    export CAPTURE_CUDA_MODEL=1
else
    unset CAPTURE_CUDA_MODEL
fi

passed=0
failed=0
failures=""
number=0
summary="$LOG_DIR/summary.txt"
: >"$summary"

# A step's log file name: its number and its name, spaces and slashes as dashes.
log_of() {
    printf '%s/%02d-%s.log' "$LOG_DIR" "$number" "$(echo "$1" | tr ' /' '--' | tr -cd 'A-Za-z0-9._-')"
}

# Writes the logs so far into the archive, when one was asked for: whole, then renamed,
# so the archive is never half written.
archive() {
    [ -n "$ARCHIVE" ] || return 0
    if tar -czf "$ARCHIVE.part" -C "$LOG_DIR" . 2>/dev/null; then
        mv -f "$ARCHIVE.part" "$ARCHIVE"
    else
        rm -f "$ARCHIVE.part"
        echo "run.sh: could not write the archive $ARCHIVE"
    fi
}

# Counts a step's result: `record NAME STATUS SECONDS LOG`.
record() {
    local name=$1 rc=$2 elapsed=$3 log=$4
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "== $name: ok (${elapsed} s)" | tee -a "$log"
        echo "ok      ${elapsed}s  $name" >>"$summary"
    else
        failed=$((failed + 1))
        failures="$failures, $name"
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "== $name: FAILED: killed after the step timeout of ${STEP_TIMEOUT} s" | tee -a "$log"
        else
            echo "== $name: FAILED (exit status $rc, ${elapsed} s)" | tee -a "$log"
        fi
        echo "FAILED  ${elapsed}s  $name (log: $(basename "$log"))" >>"$summary"
    fi
    archive
}

# Runs one step under the step timeout, its output on the console and in its log file:
# `step NAME [--expect PATTERN] COMMAND...`. With --expect, a step that exits 0 still
# fails unless its output has a line matching PATTERN (grep -E).
step() {
    local name=$1 expect="" log rc started
    shift
    if [ "$1" = "--expect" ]; then
        expect=$2
        shift 2
    fi
    number=$((number + 1))
    log=$(log_of "$name")
    echo
    echo "== $name: $*" | tee "$log"
    started=$(date +%s)
    timeout --kill-after=10 "$STEP_TIMEOUT" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ] && [ -n "$expect" ] && ! grep -qE "$expect" "$log"; then
        echo "no line of the output matches $expect" | tee -a "$log"
        rc=1
    fi
    record "$name" "$rc" $(($(date +%s) - started)) "$log"
}

skip() {
    echo
    echo "== $1: skipped: $2"
    echo "skipped       $1: $2" >>"$summary"
    archive
}

has_lib() {
    if ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qx "$1"; then
        return 0
    fi
    local dir
    for dir in ${LD_LIBRARY_PATH//:/ } /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib64 \
        /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
        [ -e "$dir/$1" ] && return 0
    done
    return 1
}

has_validation_layer() {
    local dir
    for dir in ${VK_LAYER_PATH//:/ } /usr/share/vulkan/explicit_layer.d \
        /etc/vulkan/explicit_layer.d /usr/local/share/vulkan/explicit_layer.d; do
        [ -e "$dir/VkLayer_khronos_validation.json" ] && return 0
    done
    return 1
}

echo "== machine: $(uname -srm)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi 2>&1 | tee "$LOG_DIR/00-nvidia-smi.log" || echo "nvidia-smi failed"
else
    echo "nvidia-smi: not found"
fi
# The CUDA driver, where the dynamic loader will look for it: LD_LIBRARY_PATH first (as
# the loader does), then the loader cache. Found only in a usual directory outside them,
# that directory joins LD_LIBRARY_PATH, so the tests load the library this check saw. A
# CUDA toolkit's stubs/libcuda.so (which fails every call with CUDA_ERROR_STUB_LIBRARY)
# is no driver; capture's CUDA driver model is none either, unless --driver-model.
find_driver() {
    local path dir
    for dir in ${LD_LIBRARY_PATH//:/ }; do
        [ -e "$dir/libcuda.so.1" ] && { path="$dir/libcuda.so.1"; break; }
    done
    if [ -z "$path" ]; then
        path=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF; exit}')
    fi
    if [ -z "$path" ]; then
        for dir in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib64 \
            /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
            if [ -e "$dir/libcuda.so.1" ]; then
                path="$dir/libcuda.so.1"
                export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                echo "driver: $dir is outside the loader's path: added to LD_LIBRARY_PATH"
                break
            fi
        done
    fi
    if [ -z "$path" ]; then
        echo "no CUDA driver found: libcuda.so.1 is not installed"
        return 1
    fi
    case "$(readlink -f "$path")" in
    */stubs/*)
        echo "driver: $path is the CUDA toolkit's stub library, not a driver"
        return 1
        ;;
    esac
    if grep -q "capture CUDA driver model" "$(readlink -f "$path")" 2>/dev/null; then
        if [ "$DRIVER_MODEL" = 1 ]; then
            echo "driver: $path is capture's CUDA driver model (--driver-model: expected)"
            if [ -z "$CAPTURE_CUDA_MODEL_KERNELS" ]; then
                echo "driver: CAPTURE_CUDA_MODEL_KERNELS names no kernel library for the model"
                return 1
            fi
            return 0
        fi
        echo "driver: $path is capture's CUDA driver model, not a GPU's driver (run with"
        echo "        --driver-model if the model is meant; take it off LD_LIBRARY_PATH if not)"
        return 1
    fi
    if [ "$DRIVER_MODEL" = 1 ]; then
        echo "driver: --driver-model, but $path is not capture's CUDA driver model"
        return 1
    fi
    echo "driver: $path -> $(readlink -f "$path")"
}
# Not a `step`: it runs in this shell, so what it adds to LD_LIBRARY_PATH stays.
number=$((number + 1))
driver_log=$(log_of "CUDA driver")
echo
echo "== CUDA driver" >"$driver_log"
find_driver >>"$driver_log" 2>&1
driver_rc=$?
cat "$driver_log"
record "CUDA driver" "$driver_rc" 0 "$driver_log"

# capture-suite-mock's check of the snapshot set reads the directory compiled into it, on
# the machine that built the bundle; CI runs that check there.
if [ -n "$SOURCE_SNAPSHOTS" ] && ls "$SOURCE_SNAPSHOTS"/*.snap >/dev/null 2>&1; then
    step "capture-suite mock tests" ./capture-suite-mock
else
    echo
    echo "note: skipping $SOURCE_TREE_TEST: it reads $SOURCE_SNAPSHOTS (the build machine's tree)"
    step "capture-suite mock tests" ./capture-suite-mock --skip "$SOURCE_TREE_TEST"
fi

# The CUDA suite must have run: without a `cuda::` scenario that passed (an empty binary,
# say) it fails even though it exits 0.
step "capture-cuda tests" --expect '^test cuda::.* \.\.\. ok$' ./capture-cuda-it --show-output

vulkan=0
if [ "$VULKAN_WANTED" = 0 ]; then
    vulkan_why="--no-vulkan"
elif has_lib libvulkan.so.1; then
    vulkan=1
else
    vulkan_why="libvulkan.so.1 not found"
fi
# A device is required either way (a loader that finds no driver fails, never passes
# as skipped); the validation layer only where installed. The unit tests hold the
# validation canary (misuse the layer must report), which says SKIP without the layer;
# the allocation counts run without validation, a device required.
if [ "$vulkan" = 1 ]; then
    if has_validation_layer; then
        step "capture-vulkan tests" env CAPTURE_REQUIRE_VULKAN=1 ./capture-vulkan-it
        step "capture-vulkan unit tests" env CAPTURE_REQUIRE_VULKAN=1 ./capture-vulkan-unit
    else
        echo
        echo "note: the Khronos validation layer is not installed: the Vulkan tests run without it"
        step "capture-vulkan tests" --expect '^vulkan device: ' \
            env CAPTURE_REQUIRE_VULKAN=device ./capture-vulkan-it --show-output
        step "capture-vulkan unit tests" \
            env CAPTURE_REQUIRE_VULKAN=device ./capture-vulkan-unit --show-output
    fi
    step "capture-vulkan allocation counts" env CAPTURE_REQUIRE_VULKAN=1 ./capture-vulkan-alloc-count
else
    skip "capture-vulkan tests" "$vulkan_why"
    skip "capture-vulkan unit tests" "$vulkan_why"
    skip "capture-vulkan allocation counts" "$vulkan_why"
fi

step "capture-cuda allocation counts" ./capture-cuda-alloc-count

if [ -z "$NO_CUDA_DEMO" ]; then
    step "demo --backend cuda" ./capture demo --backend cuda
else
    skip "demo --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "demo --backend vulkan" ./capture demo --backend vulkan
else
    skip "demo --backend vulkan" "$vulkan_why"
fi

# The benchmark, side by side: the library on CUDA (beside a bare cuLaunchKernel loop)
# and the same chain as a PyTorch CUDA graph, in one run.
if [ "$SHORT" = 1 ]; then
    bench_rows=(--rows 64x150,fork,update,decode,until --passes 4)
else
    bench_rows=()
fi
if [ -z "$NO_CUDA_DEMO" ]; then
    step "bench --backend cuda" ./capture bench --backend cuda "${bench_rows[@]}"
else
    skip "bench --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$DRIVER_MODEL" = 1 ]; then
    skip "torch CUDA graph" "the driver model is no GPU for PyTorch"
elif command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
    step "torch CUDA graph" python3 ./torch_graph.py
else
    skip "torch CUDA graph" "python3 with torch not found"
fi
if [ "$vulkan" = 1 ]; then
    if [ "$SHORT" = 1 ]; then
        step "bench --backend vulkan" ./capture bench --backend vulkan "${bench_rows[@]}"
    else
        step "bench --backend vulkan" ./capture bench --backend vulkan --rows launch-bound
    fi
else
    skip "bench --backend vulkan" "$vulkan_why"
fi

# The decoder: a llama-shaped decode step captured once and replayed per token, its
# three checks (ids, logits bit for bit, the host reference) on each backend.
if [ "$SHORT" = 1 ]; then
    decode_size=(--tokens 16 --layers 2)
else
    decode_size=()
fi
# On a GPU its matrix-vector products run as cuBLAS SGEMMs through foreign work, and
# the step fails when cuBLAS cannot be loaded: looked for where PyTorch installs it (its
# lib/ and the nvidia wheels beside it), then the CUDA toolkit's and the system's. On the
# driver model no real library can run, and the decoder's own kernel takes them.
find_cublas() {
    command -v python3 >/dev/null 2>&1 || return 0
    python3 - <<'PY' 2>/dev/null
import glob, os
dirs = []
try:
    import torch
    here = os.path.dirname(torch.__file__)
    dirs += [os.path.join(here, "lib"), os.path.join(os.path.dirname(here), "nvidia")]
except Exception:
    pass
try:
    import nvidia
    dirs += list(nvidia.__path__)
except Exception:
    pass
dirs += ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]
for d in dirs:
    found = sorted(glob.glob(os.path.join(d, "**", "libcublas.so*"), recursive=True), reverse=True)
    found = [p for p in found if not os.path.basename(p).startswith("libcublasLt")]
    if found:
        print(found[0])
        break
PY
}
if [ -z "$NO_CUDA_DEMO" ] && [ "$DRIVER_MODEL" = 1 ]; then
    step "decode --backend cuda" --expect '^GEMM path: own kernel' \
        ./capture decode --backend cuda "${decode_size[@]}"
elif [ -z "$NO_CUDA_DEMO" ]; then
    cublas=${CAPTURE_CUBLAS:-$(find_cublas)}
    echo "cuBLAS for the decoder: ${cublas:-not found (the decode step fails)}"
    step "decode --backend cuda" --expect '^GEMM path: cuBLAS' \
        env CAPTURE_REQUIRE_CUBLAS=1 CAPTURE_CUBLAS="$cublas" \
        LD_LIBRARY_PATH="${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}" \
        ./capture decode --backend cuda "${decode_size[@]}"
else
    skip "decode --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "decode --backend vulkan" ./capture decode --backend vulkan "${decode_size[@]}"
else
    skip "decode --backend vulkan" "$vulkan_why"
fi

# Decode until the device says stop (rule 30): the step ends with the stop flag's
# kernel; eager, per-token replays and replays of 8 (each with a host check) against one
# loop replay (a WHILE conditional node on CUDA), every mode's ids checked. The decoder's
# own kernels: a conditional body takes no foreign work (cuBLAS).
if [ -z "$NO_CUDA_DEMO" ]; then
    step "decode --until-eos --backend cuda" \
        ./capture decode --backend cuda --until-eos "${decode_size[@]}"
else
    skip "decode --until-eos --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "decode --until-eos --backend vulkan" \
        ./capture decode --backend vulkan --until-eos "${decode_size[@]}"
else
    skip "decode --until-eos --backend vulkan" "$vulkan_why"
fi

# The bucket ladder: a batch of sequences over a paged KV cache, one graph per bucket in
# one graph pool; tokens/s per bucket eager and replayed, the pool's memory against
# separate pools, every check enforced (1,000 further replays included).
ladder="decode --buckets 1,2,4,8 --backend cuda"
if [ -z "$NO_CUDA_DEMO" ] && [ "$DRIVER_MODEL" = 1 ]; then
    step "$ladder" --expect '^  separate / shared = ' \
        ./capture decode --backend cuda --buckets 1,2,4,8
elif [ -z "$NO_CUDA_DEMO" ]; then
    cublas=${CAPTURE_CUBLAS:-$(find_cublas)}
    step "$ladder" --expect '^  separate / shared = ' \
        env CAPTURE_REQUIRE_CUBLAS=1 CAPTURE_CUBLAS="$cublas" \
        LD_LIBRARY_PATH="${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}" \
        ./capture decode --backend cuda --buckets 1,2,4,8
else
    skip "$ladder" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "decode --buckets 1,2,4,8 --backend vulkan" \
        ./capture decode --backend vulkan --buckets 1,2,4,8
else
    skip "decode --buckets 1,2,4,8 --backend vulkan" "$vulkan_why"
fi

# The facade's engine example: kernels of its own with scalars, a library call through
# foreign work, weights it allocated itself through cudarc, imported; captured and
# replayed per token, checked against eager and a host reference.
step "example engine_step --backend cuda" --expect '^engine_step on cuda: ' \
    ./engine-step --backend cuda
# The MoE step's experts forked onto two streams in one graph, and the paged decode
# step changed per token through its slots (a position, a rebound KV page) in a graph
# pool, each checked bit for bit against its eager run.
step "example moe_step --backend cuda" --expect '^moe_step on cuda: ' \
    ./moe-step --backend cuda
step "example paged_step --backend cuda" --expect '^paged_step on cuda: ' \
    ./paged-step --backend cuda
# Decode until the device says stop (rule 30): one loop replay, a WHILE conditional node
# ended by the sampler's flag, its tokens checked against eager and the reference.
step "example decode_until --backend cuda" --expect '^decode_until on cuda: ' \
    ./decode-until --backend cuda

echo
if [ "$failed" -gt 0 ]; then
    echo "failed: ${failures#, }"
fi
echo "bundle: $passed passed, $failed failed" | tee -a "$summary"
archive
echo "logs: $LOG_DIR${ARCHIVE:+ (archived in $ARCHIVE)}"
[ "$failed" -eq 0 ]
