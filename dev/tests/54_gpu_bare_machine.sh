# The first GPU hour on a bare machine (issue 34 item 5; sourced by dev/run_tests.sh; alone:
# TESTS=54_gpu_bare_machine dev/run_tests.sh): the parts of dev/gpu_first_run.sh that need no GPU,
# each with a planted fault it must catch. Library discovery (dev/gpu_libs.sh) against a fake
# site-packages tree laid out as PyTorch's CUDA 13 wheels lay it out, with CUDA's compat and stubs
# folders planted on the search paths; the GPU trainer built by `make train_gpt2` where mpicc is
# missing (GPU_MPICC=) and where the libraries exist only in that tree: it links them there, runs
# to the GPU check, refuses -pi mpi, has no Open MPI linked; plain make's cuDNN and MPI defaults
# (dry runs); the script's Python choice and LD_LIBRARY_PATH (its functions, sourced); the PyTorch
# peer dev/bench/torch_gpt2.py on this CPU PyTorch at a tiny size; the sanitizer report split; the
# report writer on made-up results, with and without an H200 entry in the model. No emulated run of
# the no-MPI trainer yet (the emulated NCCL no longer needs Open MPI: dev/cuda_emu/include/emu_nccl.h).
# Cost on the shared 2-core machine: about 50 s, most of it nvcc compiling train_gpt2.cu and
# test_gpt2.cu for sm_90 (the cuDNN glue object is reused from 51_gpu_cudnn.sh when it is there,
# else +70 s).
BARE=build/test_tmp/gpu_bare
mkdir -p $BARE

# A fake toolkit and site-packages (empty files): gpu_libs.sh must take every library and header
# from nvidia/*/ of the Python's site-packages, none from the planted compat or stubs folders,
# which also hold them, and drop a compat folder from LD_LIBRARY_PATH. $1: the script to test.
bare_libs_check() {
    local script=${1:-dev/gpu_libs.sh} t=$BARE/libs_fake a out
    rm -rf $t && mkdir -p $t/site/nvidia/cu13/lib $t/site/nvidia/cu13/include $t/site/nvidia/nccl/lib \
        $t/site/nvidia/nccl/include $t/site/nvidia/cudnn/lib $t/site/nvidia/cudnn/include $t/tk/lib64/stubs \
        $t/tk/compat $t/tk/include/stubs || return 1
    a=$(cd $t && pwd)
    touch $t/site/nvidia/cu13/lib/libcublasLt.so.13 $t/site/nvidia/cu13/lib/libcublasLt.so.13.0.2 \
        $t/site/nvidia/cu13/lib/libnvrtc.so.13 $t/site/nvidia/cu13/lib/libnvrtc-builtins.so.13.0 \
        $t/site/nvidia/nccl/lib/libnccl.so.2 $t/site/nvidia/cudnn/lib/libcudnn.so.9 \
        $t/site/nvidia/cudnn/lib/libcudnn_graph.so.9 $t/site/nvidia/cu13/include/cublasLt.h \
        $t/site/nvidia/cu13/include/nvrtc.h $t/site/nvidia/nccl/include/nccl.h $t/site/nvidia/cudnn/include/cudnn.h \
        $t/tk/lib64/stubs/libcublasLt.so $t/tk/lib64/stubs/libnccl.so $t/tk/compat/libnccl.so.2 \
        $t/tk/compat/libcudnn.so.9 $t/tk/compat/libnvrtc.so.13 $t/tk/include/stubs/nccl.h
    local env=(env PYTHONPATH=$a/site GPU_LIBS_PYTHONS=python3 GPU_LIBS_SYSTEM_DIRS="$a/tk/compat:$a/tk/lib64/stubs"
               GPU_LIBS_SYSTEM_INC="$a/tk/include/stubs")
    out=$("${env[@]}" bash $script find cublasLt nccl cudnn nvrtc) || { echo "$out"; echo "find failed"; return 1; }
    echo "$out"
    local want
    want=$(printf '%s\n' "cublasLt python3 $a/site/nvidia/cu13/lib/libcublasLt.so.13 $a/site/nvidia/cu13/include" \
        "nccl python3 $a/site/nvidia/nccl/lib/libnccl.so.2 $a/site/nvidia/nccl/include" \
        "cudnn python3 $a/site/nvidia/cudnn/lib/libcudnn.so.9 $a/site/nvidia/cudnn/include" \
        "nvrtc python3 $a/site/nvidia/cu13/lib/libnvrtc.so.13 $a/site/nvidia/cu13/include")
    [ "$(printf '%s\n' "$out" | tr '\t' ' ')" = "$want" ] || { echo "want:"; echo "$want"; return 1; }
    out=$("${env[@]}" bash $script cflags cublasLt nccl) && echo "cflags: $out" &&
        [ "$out" = "-isystem $a/site/nvidia/cu13/include -isystem $a/site/nvidia/nccl/include" ] || return 1
    out=$("${env[@]}" bash $script ldflags $t/links cublasLt nccl) && echo "ldflags: $out" &&
        [ "$out" = "-L$a/links -Xlinker -rpath,$a/site/nvidia/cu13/lib -Xlinker -rpath,$a/site/nvidia/nccl/lib -Xlinker --disable-new-dtags" ] &&
        [ "$(readlink $t/links/libcublasLt.so)" = "$a/site/nvidia/cu13/lib/libcublasLt.so.13" ] || return 1
    out=$("${env[@]}" LD_LIBRARY_PATH="/usr/local/cuda/compat:/opt/x:/usr/local/cuda/lib64/stubs" bash $script ldpath \
        cublasLt nccl cudnn 2>/dev/null) && echo "ldpath: $out" &&
        [ "$out" = "$a/site/nvidia/cu13/lib:$a/site/nvidia/nccl/lib:$a/site/nvidia/cudnn/lib:/opt/x" ] || return 1
    # nothing anywhere: not found, exit 1
    ! env PYTHONPATH= GPU_LIBS_PYTHONS=python3 GPU_LIBS_SYSTEM_DIRS="$a/tk/compat" bash $script has cudnn
}

# The same check on a copy of gpu_libs.sh that no longer refuses compat and stubs folders must fail.
bare_libs_planted_compat_caught() {
    local m=$BARE/gpu_libs_no_filter.sh
    sed 's/^banned() {.*/banned() { return 1; }/' dev/gpu_libs.sh > $m
    cmp -s dev/gpu_libs.sh $m && { echo "the mutation did not apply"; return 1; }
    if bare_libs_check $m > $BARE/planted.out 2>&1; then cat $BARE/planted.out; echo "the compat folder was taken"; return 1; fi
    grep -m2 "compat\|stubs" $BARE/planted.out
}

# make's defaults, dry runs: with mpicc the MPI build as before (Open MPI's -I, -lmpi, no -DNO_MPI);
# without (GPU_MPICC=) -DNO_MPI, no -lmpi and the note; USE_CUDNN defaults to 1 here (the frontend
# headers and the toolkit's libcudnn), to 0 with a note where the frontend or libcudnn is missing.
bare_make_defaults() {
    local out
    out=$(make -n -f dev/gpu.mk USE_CUDNN=0 train_gpt2 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -q -- "-lmpi" && echo "$out" | grep -q -- "-I.*openmpi" && ! echo "$out" | grep -q NO_MPI ||
        { echo "$out"; echo "the MPI build changed"; return 1; }
    out=$(make -n -f dev/gpu.mk USE_CUDNN=0 GPU_MPICC= train_gpt2 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -q -- "-DNO_MPI" && ! echo "$out" | grep -q -- "-lmpi\|openmpi" &&
        echo "$out" | grep -q "note: no Open MPI (mpicc): train_gpt2 is built for one node" ||
        { echo "$out"; echo "the no-MPI build is not one"; return 1; }
    if [ -f build/cudnn_frontend/include/cudnn_frontend.h ] && bash dev/gpu_libs.sh has cudnn; then
        out=$(make -n -f dev/gpu.mk train_gpt2 2>&1) || { echo "$out"; return 1; }
        echo "$out" | grep -q -- "-DENABLE_CUDNN" && echo "$out" | grep -q "cudnn_att.o" &&
            ! echo "$out" | grep -q "note: USE_CUDNN=0" || { echo "$out"; echo "cuDNN not the default here"; return 1; }
        echo "USE_CUDNN defaults to 1 here"
    fi
    out=$(make -n -f dev/gpu.mk CUDNN_FRONTEND_INC=$BARE/none train_gpt2 2>&1) || { echo "$out"; return 1; }
    ! echo "$out" | grep -q -- "-DENABLE_CUDNN" &&
        echo "$out" | grep -q "note: USE_CUDNN=0: no cuDNN frontend headers ($BARE/none/cudnn_frontend.h" ||
        { echo "$out"; echo "no frontend: still cuDNN"; return 1; }
    out=$(env GPU_LIBS_SYSTEM_DIRS= GPU_LIBS_PYTHONS=/nonexistent make -n -f dev/gpu.mk train_gpt2 2>&1) || { echo "$out"; return 1; }
    ! echo "$out" | grep -q -- "-DENABLE_CUDNN" && echo "$out" | grep -q "note: USE_CUDNN=0: no libcudnn" ||
        { echo "$out"; echo "no libcudnn: still cuDNN"; return 1; }
    echo "defaults ok"
}

# A site-packages tree whose nvidia/*/lib hold only versioned names of the real libraries (links to
# the toolkit's files here), as PyTorch's wheels ship them.
bare_real_site() {
    local s=$BARE/site/nvidia lib f
    rm -rf $BARE/site && mkdir -p $s/cu13/lib $s/nccl/lib $s/cudnn/lib || return 1
    for lib in cublasLt:cu13 nvrtc:cu13 nccl:nccl cudnn:cudnn; do
        f=$(bash dev/gpu_libs.sh find ${lib%%:*} | cut -f3) && [ -e "$f" ] || { echo "no lib${lib%%:*} here"; return 1; }
        f=$(readlink -f "$f")
        ln -s "$f" "$s/${lib#*:}/lib/$(basename "$f" | sed 's/\(\.so\.[0-9]*\).*/\1/')" || return 1
    done
    ls -l $s/*/lib
}

# `make train_gpt2 test_gpt2` in a copy of the sources where mpicc is missing (GPU_MPICC=) and the libraries
# are only in that site-packages tree (GPU_LIBS_SYSTEM_DIRS empty): nvcc for sm_90, with cuDNN by
# default (the frontend headers and the tree's libcudnn).
bare_nompi_build() {
    local src=$BARE/src fe
    fe=$(pwd)/build/cudnn_frontend/include
    bare_real_site || return 1
    rm -rf $src && mkdir -p $src/dev $src/build/gpu || return 1
    cp -p Makefile train_gpt2.cu test_gpt2.cu $src/ && cp -p dev/gpu.mk dev/gpu_libs.sh $src/dev/ && cp -rp llmc $src/ || return 1
    [ -f build/gpu/cudnn_att.o ] && cp -p build/gpu/cudnn_att.o $src/build/gpu/ # 51_gpu_cudnn.sh's (70 s of one core)
    (cd $src && env GPU_LIBS_SYSTEM_DIRS= PYTHONPATH=$(cd .. && pwd)/site GPU_LIBS_PYTHONS=python3 \
        make -j2 train_gpt2 test_gpt2 GPU_MPICC= NVCC_ARCH=-arch=sm_90 CUDNN_FRONTEND_INC=$fe) \
        > $BARE/build.out 2>&1 || { tail -30 $BARE/build.out; return 1; }
    cat $BARE/build.out
    grep -q "note: no Open MPI (mpicc)" $BARE/build.out && grep -q -- "-DNO_MPI" $BARE/build.out &&
        grep -q -- "-DENABLE_CUDNN" $BARE/build.out && [ -x $src/train_gpt2 ] && [ -x $src/test_gpt2 ]
}

# The binary: its libraries resolve into the site-packages tree (a DT_RPATH, which the libraries'
# own dlopen()s use too), no Open MPI linked; -pi mpi
# refused in one line; without -pi (one process, -pi fs by default) it runs to the GPU check.
bare_nompi_binary() {
    local bin=$BARE/src/train_gpt2 site out rc lib
    site=$(cd $BARE/site && pwd)
    [ -x $bin ] || { echo "$bin missing (bare_nompi_build failed)"; return 1; }
    readelf -d $bin | grep -E "NEEDED|RUNPATH|RPATH"
    readelf -d $bin | grep -q "(RPATH).*$site/nvidia/cudnn/lib" || { echo "no DT_RPATH to the site tree"; return 1; }
    ! readelf -d $bin | grep -q "libmpi" || { echo "Open MPI is linked"; return 1; }
    out=$(env -u LD_LIBRARY_PATH ldd $bin) || return 1
    for lib in libcublasLt.so libnccl.so libcudnn.so; do
        echo "$out" | grep "$lib" | grep -q "=> $site/nvidia/" || { echo "$out"; echo "$lib not from the site tree"; return 1; }
    done
    out=$($bin -pi mpi 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: -pi mpi: this train_gpt2 was built without Open MPI (mpicc was missing): use -pi fs or -pi tcp on one node, or no -pi for one process" ] ||
        return 1
    out=$($bin -x 1 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: no CUDA GPU found; use ./train_gpt2cpu for CPU training" ] || return 1
    out=$($BARE/src/test_gpt2 2>&1); rc=$?
    echo "test_gpt2: $out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: no CUDA GPU found; use ./test_gpt2cpu for the CPU test" ] || return 1
    out=$($bin -h | grep -- "-pi ") && echo "$out" && echo "$out" | grep -q 'default "fs"'
}

check bare_libs_fake_site bare_libs_check dev/gpu_libs.sh
check bare_libs_planted_compat_caught bare_libs_planted_compat_caught
check bare_make_defaults bare_make_defaults
check bare_nompi_nvcc_build bare_nompi_build
check bare_nompi_binary bare_nompi_binary

# The script's arguments are checked before anything else (no GPU needed): one line naming the flag.
bare_first_run_bad_args() {
    local args out rc
    for args in "--llmc /nonexistent/train_gpt2cu|--llmc /nonexistent/train_gpt2cu: not an executable file" \
                "--llmc dev|--llmc dev: not an executable file (llm.c's train_gpt2cu, built from its source) nor a folder" \
                "--steps 4|--steps: want a whole number from 5 to 1000" "--budget 1m|--budget: want whole seconds" \
                "--out|--out needs a value" "--fast|unknown argument '--fast'"; do
        # shellcheck disable=SC2086
        out=$(timeout 20 bash dev/gpu_first_run.sh ${args%%|*} 2>&1); rc=$?
        echo "${args%%|*}: $out (exit $rc)"
        [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
            printf '%s' "$out" | grep -qF "gpu_first_run.sh: error: ${args#*|}" || return 1
    done
}

# The script's Python: the first of its list that imports torch (the PATH python3 on the GPU machine,
# /usr/bin/python3 here), else the first that runs, with exit 1. $1: the script (a planted copy below).
bare_first_run_python_choice() {
    local script=${1:-dev/gpu_first_run.sh} d=$BARE/pythons got
    rm -rf $d && mkdir -p $d || return 1
    printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' > $d/notorch  # no site-packages: no torch
    printf '#!/bin/sh\nexec /usr/bin/python3 "$@"\n' > $d/withtorch
    chmod +x $d/notorch $d/withtorch
    /usr/bin/python3 -c 'import torch' || { echo "/usr/bin/python3 has no torch here"; return 1; }
    ! $d/notorch -c 'import torch' 2>/dev/null || { echo "python3 -S still imports torch"; return 1; }
    got=$(FIRST_RUN_SOURCE_ONLY=1 FIRST_RUN_PYTHONS="$d/notorch $d/withtorch" bash -c ". $script && pick_python") &&
        echo "notorch withtorch -> $got" && [ "$got" = "$d/withtorch" ] || return 1
    got=$(FIRST_RUN_SOURCE_ONLY=1 FIRST_RUN_PYTHONS="$d/withtorch $d/notorch" bash -c ". $script && pick_python") &&
        echo "withtorch notorch -> $got" && [ "$got" = "$d/withtorch" ] || return 1
    got=$(FIRST_RUN_SOURCE_ONLY=1 FIRST_RUN_PYTHONS="/nonexistent/python3 $d/notorch" bash -c ". $script && pick_python")
    local rc=$?
    echo "missing notorch -> $got (exit $rc)"
    [ $rc -eq 1 ] && [ "$got" = "$d/notorch" ]
}

# The same on a copy of the script that takes the first Python whatever it imports must fail.
bare_first_run_python_choice_planted() {
    local m=$BARE/first_run_any_python.sh
    sed 's/if timeout 120 "\$py" -c .import torch. > \/dev\/null 2>&1; then/if true; then/' dev/gpu_first_run.sh > $m
    cmp -s dev/gpu_first_run.sh $m && { echo "the mutation did not apply"; return 1; }
    if bare_first_run_python_choice $m > $BARE/planted_py.out 2>&1; then cat $BARE/planted_py.out; return 1; fi
    tail -1 $BARE/planted_py.out
}

# The script's LD_LIBRARY_PATH on the fake site-packages of bare_libs_check (run it first): the site
# folders first, the inherited compat and stubs folders gone (with a note), the rest kept.
bare_first_run_ldpath() {
    local a out
    a=$(cd $BARE/libs_fake && pwd) || return 1
    out=$(FIRST_RUN_SOURCE_ONLY=1 PYTHONPATH=$a/site GPU_LIBS_PYTHONS=python3 GPU_LIBS_SYSTEM_DIRS="$a/tk/compat" \
        LD_LIBRARY_PATH="/usr/local/cuda-13.0/compat:/opt/lib:/usr/local/cuda/targets/x86_64-linux/lib/stubs" \
        bash -c '. dev/gpu_first_run.sh && libs_env && echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"') || { echo "$out"; return 1; }
    echo "$out"
    echo "$out" | grep -q "note: /usr/local/cuda-13.0/compat left out of LD_LIBRARY_PATH" &&
        [ "$(echo "$out" | tail -1)" = "LD_LIBRARY_PATH=$a/site/nvidia/cu13/lib:$a/site/nvidia/nccl/lib:$a/site/nvidia/cudnn/lib:/opt/lib" ]
}

# Our PyTorch GPT-2 on this CPU PyTorch at a tiny size (no torch.compile before 2.0): a median per B,
# the parameter count of GPT-2's closed form (tied classifier, vocabulary padded to 128), the last
# loss near ln(padded vocabulary) (a uniform guess at init; 5 steps on random tokens move it little),
# its JSON.
bare_torch_gpt2_cpu() {
    local py=/usr/bin/python3 out
    $py dev/data/tiny_shard.py $BARE/tok.bin --ntok 20000 --vocab 257 --seed 4 > /dev/null || return 1
    out=$($py dev/bench/torch_gpt2.py --B 4,2 --T 32 --layers 2 --channels 64 --heads 4 --vocab 257 --steps 5 --from 3 \
        --data $BARE/tok.bin --eager-B 2 --json $BARE/torch.json) || { echo "$out"; return 1; }
    echo "$out"
    $py - $BARE/torch.json <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
L, C, V, T = 2, 64, 384, 32  # V: 257 padded to 128
want = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
print("parameters %d, GPT-2's closed form %d" % (d["parameters"], want))
ok = d["parameters"] == want and [r["B"] for r in d["runs"]][:2] == [4, 2]
for r in d["runs"]:
    print("%s B %d: %s ms, loss %.3f (ln %d = %.3f)" % (r["mode"], r["B"], r["median_ms"], r["loss"], V, math.log(V)))
    ok &= r["median_ms"] is not None and r["median_ms"] > 0 and abs(r["loss"] - math.log(V)) < 0.6
sys.exit(0 if ok else 1)
PY
}

# Where torch.compile fails (a machine without Python's headers, say), our PyTorch GPT-2 says why
# once, does not try the other B compiled, and times every B eager instead: a torch.compile that
# raises, put in front of this CPU PyTorch.
bare_torch_gpt2_compile_fallback() {
    /usr/bin/python3 - --B 4,2 --T 32 --layers 1 --channels 32 --heads 2 --vocab 257 --steps 5 --eager-B 2 \
        --json $BARE/fallback.json <<'PY'
import runpy, sys, torch
torch.__version__ = "2.9.0"
def failing_compile(model):
    def run(*args, **kwargs):
        raise RuntimeError("planted: Python.h: No such file or directory")
    return run
torch.compile = failing_compile
sys.argv = ["torch_gpt2.py"] + sys.argv[1:]
runpy.run_path("dev/bench/torch_gpt2.py", run_name="__main__")
PY
    [ $? -eq 1 ] || { echo "want exit 1 (a run failed)"; return 1; }
    /usr/bin/python3 - $BARE/fallback.json <<'PY'
import json, sys
runs = [(r["mode"], r["B"], r["median_ms"] is not None, r.get("error", "")[:40]) for r in json.load(open(sys.argv[1]))["runs"]]
print(runs)
want = [("compile", 4, False, "planted: Python.h: No such file or direc"),
        ("compile", 2, False, "not tried: planted: Python.h: No such fi"), ("eager", 4, True, ""), ("eager", 2, True, "")]
sys.exit(0 if runs == want else 1)
PY
}

# The sanitizer split on made-up logs in compute-sanitizer's format: NCCL's start-up probing (an API
# error from libnccl) and a race in cuBLASLt's split-K kernel are the libraries' (exit 0); a read out
# of bounds in our attention backward and an API error from our binary are ours (exit 1, named); a
# summary with errors but no report is an error (exit 2).
bare_sanitizer_split() {
    local d=$BARE/sanitizer rc
    mkdir -p $d
    cat > $d/lib.log <<'LOG'
========= COMPUTE-SANITIZER
step 1/2 | loss 10.9
========= Program hit cudaErrorInvalidDeviceFunction (error 98) due to "invalid device function" on CUDA API call to cudaFuncGetAttributes.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2f5a1b] in libcuda.so.1
=========         Host Frame: ncclCommInitRank [0x5a1b] in /site/nvidia/nccl/lib/libnccl.so.2
=========         Host Frame: main [0x1234] in train_gpt2
=========
========= Error: Race reported between Write access at sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_splitK_kernel+0x1a0
=========     and Read access at sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_splitK_kernel+0x2c0 [12 hazards]
=========
========= ERROR SUMMARY: 2 errors
LOG
    cp $d/lib.log $d/ours.log
    cat >> $d/ours.log <<'LOG'
========= Invalid __global__ read of size 16 bytes
=========     at void attention_backward_fa2_dkv_kernel<64>(bf16 *, const bf16 *, int)+0x4b0 in /x/llmc/attention_fa2_backward.cuh:210
=========     by thread (3,0,0) in block (7,2,0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f5a1b] in libcuda.so.1
=========         Host Frame: main [0x1234] in train_gpt2
=========
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpyAsync.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2f5a1b] in /lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame: gpt2_forward [0x99] in /x/train_gpt2
=========
LOG
    echo "========= ERROR SUMMARY: 3 errors" > $d/bare.log
    python3 dev/sanitizer_split.py $d/lib.log | tee $d/lib.out; rc=${PIPESTATUS[0]}
    [ $rc -eq 0 ] && grep -q "^ours 0, libraries 2 (NCCL 1, cuBLAS 1)" $d/lib.out || return 1
    python3 dev/sanitizer_split.py $d/ours.log | tee $d/ours.out; rc=${PIPESTATUS[0]}
    [ $rc -eq 1 ] && grep -q "^ours 2, libraries 2" $d/ours.out && grep -q "kernel attention_backward_fa2_dkv_kernel" $d/ours.out &&
        grep -q "called from /x/train_gpt2" $d/ours.out || return 1
    python3 dev/sanitizer_split.py $d/bare.log; [ $? -eq 2 ]
}

# The report on made-up results of an H200 run: the side-by-side table (ours, PyTorch, llm.c,
# modelled), -ge, a profile, ncu's durations in microseconds from its msecond unit, a FAIL row; the
# model's H200 constants where it has them, else H100's with a note.
bare_first_run_report() {
    local o=$BARE/report py=python3
    rm -rf $o && mkdir -p $o/profiles || return 1
    printf '%s\t%s\t%s\t%s\n' env date "2026-12-01 10:00 UTC" "" time "ours -at ours B 8" measured 29.5 \
        time "ours -at cudnn B 8" measured 18.8 time "ours -at ours B 64" measured 155 time "ours -at cudnn B 64" measured 118 \
        time "ours -at cudnn -ge 1 B 64" measured 112.1 time "llm.c B 8" measured 17.4 time "ours -at ours B 16" FAIL logs/x.log \
        check sanitizer_memcheck_ours pass "ours 0, libraries 3 (NCCL 3)" build cudnn pass "81 s" > $o/results.tsv
    echo '{"torch": "2.11.0", "device": "NVIDIA H200", "sdpa": true, "fused_adamw": true, "runs": [{"mode": "compile", "B": 64, "median_ms": 119.5}, {"mode": "eager", "B": 64, "median_ms": 168.0}, {"mode": "eager", "B": 8, "median_ms": null, "error": "CUDA out of memory"}]}' > $o/torch.json
    printf 'op profile (-op 1, rank 0): 9 timed steps, 118.000 ms per step\n| op family | ms/step |\n|---|---|\n| gelu (fwd+bwd) | 11.0 |\n| step | 118.0 |\n' > $o/profiles/op_cudnn_B64.txt
    printf '"ID","Kernel Name","Grid Size","Block Size","Section Name","Metric Name","Metric Unit","Metric Value"\n"0","void attention_backward_fa2_kernel<64>(bf16*)","(12, 8, 1)","(128, 1, 1)","GPU Speed Of Light Throughput","Duration","msecond","1.02"\n"0","void attention_backward_fa2_kernel<64>(bf16*)","(12, 8, 1)","(128, 1, 1)","Occupancy","Achieved Occupancy","%%","6.1"\n"1","void attention_backward_fa2_kernel<64>(bf16*)","(12, 8, 1)","(128, 1, 1)","GPU Speed Of Light Throughput","Duration","usecond","1,040"\n' > $o/ncu_ours.csv
    $py dev/bench/gpu_model.py --json > $o/model_h100.json || return 1
    $py - $o/model_h100.json $o/model.json <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
d["gpus"]["H200"] = {"step_ms": {"-at ours B 8": 11.0, "-at cudnn B 8": 10.5}, "attention_ms": {}}
json.dump(d, open(sys.argv[2], "w"))
PY
    $py dev/gpu_first_run_report.py --out $o --card "NVIDIA H200" --steps 10 > $o/out.md || { cat $o/out.md; return 1; }
    cat $o/out.md
    grep -qF "| 8 | 29.50 | 18.80 | — | — | 17.40 | 11.00 | 10.50 |" $o/REPORT.md &&
        grep -qF "| 64 | 155.00 | 118.00 | 119.50 | 168.00 | — |" $o/REPORT.md &&
        grep -qF "with H200 constants" $o/REPORT.md && grep -qF "| -at cudnn | 118.00 | 112.10 | 0.950 |" $o/REPORT.md &&
        grep -qF "| gelu (fwd+bwd) | 11.0 |" $o/REPORT.md && grep -qF "PyTorch eager B 8: CUDA out of memory" $o/REPORT.md &&
        grep -qF "| -at ours | attention_backward_fa2_kernel<64> | 2 | 1030.0 | (12, 8, 1) | (128, 1, 1) | — | 6.1 |" $o/REPORT.md &&
        grep -qF "| time | ours -at ours B 16 | FAIL | logs/x.log |" $o/REPORT.md || { echo "REPORT.md lacks a row"; return 1; }
    $py -c "import json,sys; d=json.load(open('$o/report.json')); m=[f for f in d['figures'] if f['kind']=='measured'];
sys.exit(0 if all(f['card']=='NVIDIA H200' and f['date'] for f in m) and len(m) == 8 else 1)" || { echo "report.json"; return 1; }
    $py -c "import json,sys; d=json.load(open(sys.argv[1])); d['gpus'].pop('H200', None); json.dump(d, open(sys.argv[2], 'w'))" \
        $o/model_h100.json $o/model.json || return 1
    $py dev/gpu_first_run_report.py --out $o --card "NVIDIA H200" > /dev/null &&
        grep -qF "with H100 constants (the model has no constants for NVIDIA H200: H100's)" $o/REPORT.md
}

# --model-only through the script itself: the modelled columns are gpu_model.py's own figures. And
# it will not empty a work folder it did not make.
bare_first_run_model_only() {
    local out rc
    rm -rf $BARE/model_only $BARE/work && mkdir -p $BARE/work/keep && touch $BARE/work/keep/file || return 1
    out=$(FIRST_RUN_WORK=$BARE/work bash dev/gpu_first_run.sh --model-only --out $BARE/model_only 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && echo "$out" | grep -q "error: FIRST_RUN_WORK $BARE/work: a folder this script did not make" &&
        [ -f $BARE/work/keep/file ] || return 1
    rm -rf $BARE/work
    FIRST_RUN_WORK=$BARE/work bash dev/gpu_first_run.sh --model-only --out $BARE/model_only > $BARE/model_only.out 2>&1 ||
        { cat $BARE/model_only.out; return 1; }
    [ -f $BARE/work/.gpu_first_run_work ] || { echo "no work folder marker"; return 1; }
    cat $BARE/model_only/REPORT.md
    python3 - $BARE/model_only <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/model.json"))["gpus"]["H100"]["step_ms"]
text = open(sys.argv[1] + "/REPORT.md").read()
rows = ["| %d | — | — | — | — | %.2f | %.2f |" % (B, d["-at ours B %d" % B], d["-at cudnn B %d" % B]) for B in (8, 16, 32, 64)]
missing = [r for r in rows if r not in text]
print("missing rows:", missing)
sys.exit(1 if missing else 0)
PY
}

# The scripts parse, and shellcheck (where installed) finds nothing.
bare_first_run_shell() {
    bash -n dev/gpu_first_run.sh && bash -n dev/gpu_libs.sh && bash -n dev/build_llmc.sh || return 1
    if command -v shellcheck > /dev/null; then shellcheck dev/gpu_first_run.sh dev/gpu_libs.sh dev/build_llmc.sh && echo "shellcheck: clean"
    else echo "shellcheck not installed: bash -n only"; fi
}

check bare_first_run_bad_args bare_first_run_bad_args
check bare_first_run_python_choice bare_first_run_python_choice
check bare_first_run_python_choice_planted bare_first_run_python_choice_planted
check bare_first_run_ldpath bare_first_run_ldpath
check bare_torch_gpt2_cpu bare_torch_gpt2_cpu
check bare_torch_gpt2_compile_fallback bare_torch_gpt2_compile_fallback
check bare_sanitizer_split bare_sanitizer_split
check bare_first_run_report bare_first_run_report
check bare_first_run_model_only bare_first_run_model_only
check bare_first_run_shell bare_first_run_shell

# The script's build phase, make dry-running (-n): its copies of the sources (from git here, with an
# untracked file; by tar in a folder that is no checkout's top) hold what make needs, and make there
# builds for -arch=native, the cuDNN variant with the frontend given by an absolute path.
bare_first_run_build_phase() {
    local out=$BARE/phase nogit=$BARE/nogit n
    rm -rf $out $nogit && mkdir -p $out || return 1
    touch bare_untracked_probe.txt
    n=$(FIRST_RUN_SOURCE_ONLY=1 OUT=$(cd $out && pwd) WORK=$(cd $out && pwd) bash -c ". dev/gpu_first_run.sh &&
        build_variant cudnn -n USE_CUDNN=1 CUDNN_FRONTEND_INC=$(pwd)/build/cudnn_frontend/include" 2>&1); local rc=$?
    rm -f bare_untracked_probe.txt
    [ $rc -eq 0 ] || { echo "$n"; return 1; }
    echo "$n" | grep -E "^nvcc" | cut -c1-150
    [ -f $out/build/cudnn/bare_untracked_probe.txt ] && [ -f $out/build/cudnn/dev/gpu_libs.sh ] &&
        [ ! -e $out/build/cudnn/build ] || { echo "the git copy is wrong"; return 1; }
    echo "$n" | grep -q -- "-arch=native .*-DENABLE_CUDNN -c -o build/gpu/obj/train_gpt2_BF16_cudnn1_" &&
        echo "$n" | grep -q -- "-isystem $(pwd)/build/cudnn_frontend/include" || { echo "not the cuDNN build for this GPU"; return 1; }
    # without git: a copy of that copy, made by tar
    cp -r $out/build/cudnn $nogit && mkdir -p $nogit/build/junk $nogit/rep && touch $nogit/rep/x || return 1
    (cd $nogit && FIRST_RUN_SOURCE_ONLY=1 OUT=$(pwd)/rep bash -c '. dev/gpu_first_run.sh && copy_tree ../nogit_copy') || return 1
    [ -f $BARE/nogit_copy/dev/gpu.mk ] && [ ! -e $BARE/nogit_copy/build ] && [ ! -e $BARE/nogit_copy/rep ] &&
        echo "tar copy: ok"
}
check bare_first_run_build_phase bare_first_run_build_phase

# dev/build_llmc.sh (--llmc FOLDER) on a stand-in for llm.c's source written here: a Makefile that
# takes the same variables, adds -lnvidia-ml and -lcudnn as llm.c's does, and a main whose headers
# make the two calls the script changes (cudaMemAdvise with cudaCpuDeviceId, which CUDA 13's nvcc
# refuses; NVML where nvml.h is found). Built for sm_90 where the libraries are only in the bare
# site tree: the binary is made, the checkout untouched, cuDNN linked through the tree (DT_RPATH),
# NVML off (its header test false in the copy, no -lnvidia-ml on the link line). A copy of the script without the cudaMemAdvise change must fail to build it; a
# folder that is not llm.c's and a bad --arch are refused in one line. About 10 s (nvcc, twice).
bare_fake_llmc() { # DIR: the stand-in
    local d=$1
    rm -rf $d && mkdir -p $d/llmc || return 1
    cat > $d/Makefile <<'MK'
NVCC := $(shell which nvcc)
NVCC_LDFLAGS = -lcublasLt
NVCC_LDLIBS =
ifneq ($(NO_MULTI_GPU), 1)
  $(error want NO_MULTI_GPU=1)
endif
  NVCC_LDFLAGS += -lnvidia-ml
ifeq ($(USE_CUDNN), 1)
  ifeq ($(shell [ -d cudnn-frontend/include ] && echo yes), yes)
    NVCC_LDFLAGS += -lcudnn
  else
    $(error no cudnn-frontend/include)
  endif
endif
train_gpt2cu: train_gpt2.cu
	$(NVCC) -O1 --generate-code arch=compute_$(GPU_COMPUTE_CAPABILITY),code=sm_$(GPU_COMPUTE_CAPABILITY) $< $(NVCC_LDFLAGS) $(NVCC_LDLIBS) -o $@
MK
    printf '%s\n' '#include <cuda_runtime.h>' 'inline int host_first(void* p, size_t n) {' \
        '    return (int)cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId);' '}' > $d/llmc/cuda_utils.cuh
    printf '%s\n' '#if __has_include(<nvml.h>)' '#include <nvml.h>' 'inline int power_probe() { return (int)nvmlInit(); }' \
        '#else' 'inline int power_probe() { return -1; }' '#endif' > $d/llmc/mfu.h
    printf '%s\n' '#include "llmc/cuda_utils.cuh"' '#include "llmc/mfu.h"' \
        'int main() { void* p = nullptr; return host_first(p, 16) + power_probe(); }' > $d/train_gpt2.cu
}
bare_build_llmc() {
    local src=$BARE/llmc_src dest=$BARE/llmc_out plant=$BARE/llmc_plant site sum rc msg out
    command -v nvcc > /dev/null || { echo "no nvcc here"; return 1; }
    bare_fake_llmc $src && bare_real_site > /dev/null || return 1
    site=$(cd $BARE/site && pwd)
    sum=$(cat $src/Makefile $src/*.cu $src/llmc/* | md5sum)
    env GPU_LIBS_SYSTEM_DIRS= PYTHONPATH=$site GPU_LIBS_PYTHONS=python3 \
        bash dev/build_llmc.sh $src --arch 90 --out $dest || { cat $dest/build.log; return 1; }
    grep nvcc $dest/build.log | cut -c1-240
    [ -x $dest/train_gpt2cu ] && [ "$(cat $src/Makefile $src/*.cu $src/llmc/* | md5sum)" = "$sum" ] ||
        { echo "no binary, or the checkout was written to"; return 1; }
    readelf -d $dest/train_gpt2cu | grep -E "NEEDED|RPATH"
    readelf -d $dest/train_gpt2cu | grep -q "(RPATH).*$site/nvidia/cudnn/lib" || { echo "cuDNN not linked through the site tree"; return 1; }
    ! grep -q -- "-lnvidia-ml" $dest/build.log && grep -q "^#if 0" $dest/src/llmc/mfu.h &&
        ! readelf -d $dest/train_gpt2cu | grep -q "libnvidia-ml" || { echo "NVML is still on"; return 1; }
    # planted: a copy of the script without its cudaMemAdvise change (beside links to what it uses)
    rm -rf $plant && mkdir -p $plant/dev $plant/build && ln -s "$(pwd)/dev/gpu_libs.sh" $plant/dev/ &&
        ln -s "$(pwd)/build/cudnn_frontend" $plant/build/ || return 1
    sed 's/cudaMemLocation{cudaMemLocationTypeHost, 0}/cudaCpuDeviceId/' dev/build_llmc.sh > $plant/dev/build_llmc.sh
    cmp -s dev/build_llmc.sh $plant/dev/build_llmc.sh && { echo "the mutation did not apply"; return 1; }
    env GPU_LIBS_SYSTEM_DIRS= PYTHONPATH=$site GPU_LIBS_PYTHONS=python3 \
        bash $plant/dev/build_llmc.sh $src --arch 90 > /dev/null 2>&1; rc=$?
    [ $rc -ne 0 ] && grep -q "cudaMemAdvise" $plant/build/llmc/build.log || { echo "the planted script built it (exit $rc)"; return 1; }
    echo "planted: the unchanged cudaMemAdvise call fails to build (exit $rc)"
    for msg in "dev|dev: no Makefile there (want a checkout of llm.c's source)" \
               "$src --arch 9.0|--arch 9.0: want the compute capability as digits (90)"; do
        out=$(bash dev/build_llmc.sh ${msg%%|*} --out $BARE/llmc_refused 2>&1); rc=$?
        echo "${msg%%|*}: $out (exit $rc)"
        [ $rc -eq 1 ] && [ "$out" = "build_llmc.sh: error: ${msg#*|}" ] || return 1
    done
}
check bare_build_llmc bare_build_llmc
