#!/usr/bin/env bash
# capture's GPU bundle (made by `cargo xtask gpu-bundle`, from xtask/gpu/run.sh): runs the
# prebuilt tests and demos on this machine, CUDA required. Ends with
# `bundle: N passed, M failed`, and exits non-zero when anything failed. See README.txt.
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

export CAPTURE_SNAPSHOTS="$PWD/snapshots" INSTA_WORKSPACE_ROOT="$PWD" INSTA_UPDATE=no \
    CI=true CAPTURE_REQUIRE_CUDA=1 LP_NUM_THREADS=0

passed=0
failed=0
failures=""

step() {
    local name=$1
    shift
    echo
    echo "== $name: $*"
    if "$@"; then
        passed=$((passed + 1))
        echo "== $name: ok"
    else
        failed=$((failed + 1))
        failures="$failures, $name"
        echo "== $name: FAILED"
    fi
}

skip() {
    echo
    echo "== $1: skipped: $2"
}

# Runs the CUDA suite ("$@"), which must have run: without a `cuda::` scenario that passed
# (an empty binary, say) it fails even though it exits 0.
cuda_tests() {
    local log rc
    log=$(mktemp) || return 1
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ] && ! grep -q '^test cuda::.* \.\.\. ok$' "$log"; then
        echo "no cuda:: scenario test ran"
        rc=1
    fi
    rm -f "$log"
    return "$rc"
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
    nvidia-smi || echo "nvidia-smi failed"
else
    echo "nvidia-smi: not found"
fi
# The CUDA driver, where the dynamic loader will look for it: the loader cache and
# LD_LIBRARY_PATH. Found only in a usual directory outside them, that directory joins
# LD_LIBRARY_PATH, so the tests load the library this check saw. A CUDA toolkit's
# stubs/libcuda.so (which fails every call with CUDA_ERROR_STUB_LIBRARY) is no driver.
find_driver() {
    local path dir
    path=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF; exit}')
    if [ -z "$path" ]; then
        for dir in ${LD_LIBRARY_PATH//:/ }; do
            [ -e "$dir/libcuda.so.1" ] && { path="$dir/libcuda.so.1"; break; }
        done
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
        echo "no CUDA driver found: libcuda.so.1 is not installed (the CUDA tests will fail)"
        return 1
    fi
    case "$(readlink -f "$path")" in
    */stubs/*)
        echo "driver: $path is the CUDA toolkit's stub library, not a driver (the CUDA tests will fail)"
        return 1
        ;;
    esac
    echo "driver: $path -> $(readlink -f "$path")"
}
find_driver || true

# capture-suite-mock's check of the snapshot set reads the directory compiled into it, on
# the machine that built the bundle; CI runs that check there.
if [ -n "$SOURCE_SNAPSHOTS" ] && ls "$SOURCE_SNAPSHOTS"/*.snap >/dev/null 2>&1; then
    step "capture-suite mock tests" ./capture-suite-mock
else
    echo
    echo "note: skipping $SOURCE_TREE_TEST: it reads $SOURCE_SNAPSHOTS (the build machine's tree)"
    step "capture-suite mock tests" ./capture-suite-mock --skip "$SOURCE_TREE_TEST"
fi

step "capture-cuda tests" cuda_tests ./capture-cuda-it --show-output

vulkan=0
if has_lib libvulkan.so.1; then
    vulkan=1
    if has_validation_layer; then
        step "capture-vulkan tests" env CAPTURE_REQUIRE_VULKAN=1 ./capture-vulkan-it
    else
        echo
        echo "note: the Khronos validation layer is not installed: the Vulkan tests run without it"
        step "capture-vulkan tests" ./capture-vulkan-it
    fi
else
    skip "capture-vulkan tests" "libvulkan.so.1 not found"
fi

step "capture-cuda allocation counts" env CAPTURE_REQUIRE_CUDA=1 ./capture-cuda-alloc-count

if [ -z "$NO_CUDA_DEMO" ]; then
    step "demo --backend cuda" ./capture demo --backend cuda
else
    skip "demo --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "demo --backend vulkan" ./capture demo --backend vulkan
else
    skip "demo --backend vulkan" "libvulkan.so.1 not found"
fi

# The benchmark, side by side: the library on CUDA (beside a bare cuLaunchKernel loop)
# and the same chain as a PyTorch CUDA graph, in one run.
if [ -z "$NO_CUDA_DEMO" ]; then
    step "bench --backend cuda" ./capture bench --backend cuda
else
    skip "bench --backend cuda" "$NO_CUDA_DEMO"
fi
if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
    step "torch CUDA graph" python3 ./torch_graph.py
else
    skip "torch CUDA graph" "python3 with torch not found"
fi
if [ "$vulkan" = 1 ]; then
    step "bench --backend vulkan" ./capture bench --backend vulkan --rows launch-bound
else
    skip "bench --backend vulkan" "libvulkan.so.1 not found"
fi

# The decoder: a llama-shaped decode step captured once and replayed per token, its
# three checks (ids, logits bit for bit, the host reference) on each backend.
if [ -z "$NO_CUDA_DEMO" ]; then
    step "decode --backend cuda" ./capture decode --backend cuda
else
    skip "decode --backend cuda" "$NO_CUDA_DEMO"
fi
if [ "$vulkan" = 1 ]; then
    step "decode --backend vulkan" ./capture decode --backend vulkan
else
    skip "decode --backend vulkan" "libvulkan.so.1 not found"
fi

echo
if [ "$failed" -gt 0 ]; then
    echo "failed: ${failures#, }"
fi
echo "bundle: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
