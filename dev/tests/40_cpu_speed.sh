# Cheap correctness checks of the fast CPU kernels (sourced by dev/run_tests.sh; the speed itself
# is measured by dev/bench/cpu.py, not here): the kernel test (matmul, attention, vector math
# against naive double loops) on every vector width and tile the headers support, the PyTorch agreement
# on a model whose sizes fit none of the tile sizes, and losses that are the same on 1 and 2
# threads and from run to run.
CPUK_TMP=build/test_tmp/cpu_speed
mkdir -p $CPUK_TMP

# Builds and runs dev/tests/cpu_kernels_test.c with extra compiler flags $@ (a small shared-pack
# budget so that large K goes through several rounds; weight gradients of any size streamed).
cpuk_kernels() {
    gcc $(make -s --no-print-directory cpu-cflags) -Illmc -DGEMM_SHARED_FLOATS=8192 \
        -DGEMM_STREAM_BYTES=0 "$@" \
        dev/tests/cpu_kernels_test.c -o $CPUK_TMP/kernels -lm || return 1
    $CPUK_TMP/kernels
}

# d2 with 96 channels, 3 heads, B 3, T 37: every matmul and attention size leaves tile edges
cpuk_odd_reference() {
    local d=$CPUK_TMP/odd
    mkdir -p $d
    /usr/bin/python3 train_gpt2.py --model d2 --channels 96 --heads 3 --vocab 257 --max-seq 64 --seed 3 \
        --write-model $d/model.bin --data data/kjv/kjv_val.bin --B 3 --T 37 --write-state $d/state.bin \
        --steps 10 --write-losses $d/losses.txt || return 1
    OMP_NUM_THREADS=2 ./test_gpt2cpu $d/model.bin $d/state.bin $d/losses.txt data/kjv/kjv_val.bin
}

# The same losses on 1 thread, 2 threads and 2 threads again.
cpuk_thread_determinism() {
    local flags="-e d2 -V 257 -sl 64 -b 3 -t 37 -x 6 -v 3 -m 2 -s 0 -l 1e-3 -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin"
    OMP_NUM_THREADS=1 ./train_gpt2cpu $flags -o $CPUK_TMP/det1 >/dev/null || return 1
    OMP_NUM_THREADS=2 ./train_gpt2cpu $flags -o $CPUK_TMP/det2 >/dev/null || return 1
    OMP_NUM_THREADS=2 ./train_gpt2cpu $flags -o $CPUK_TMP/det3 >/dev/null || return 1
    cat $CPUK_TMP/det1/main.log
    [ "$(grep -c trl $CPUK_TMP/det1/main.log)" = 6 ] &&
    cmp $CPUK_TMP/det1/main.log $CPUK_TMP/det2/main.log && cmp $CPUK_TMP/det2/main.log $CPUK_TMP/det3/main.log
}

# The kernel test's bitwise order checks fail on a copy whose 16 lane partials are added in sequence
# instead of by the specified tree (a reduction order of its own), and the trainer refuses to start
# when built with GCC's default contraction of a * b + c (-ffp-contract=fast).
cpuk_order_plant() {
    local d=$CPUK_TMP/plant
    rm -rf $d && mkdir -p $d && cp -r llmc $d/ || return 1
    sed -i 's|for (int i = 0; i < h; i++) { l\[i\] += l\[i + h\]; }|for (int i = 1; i < 16; i++) { l[0] += l[i]; } break;|' $d/llmc/cpu_vecmath.h
    cmp -s llmc/cpu_vecmath.h $d/llmc/cpu_vecmath.h && { echo "the plant did not apply"; return 1; }
    gcc $(make -s --no-print-directory cpu-cflags) -I$d/llmc -DGEMM_SHARED_FLOATS=8192 dev/tests/cpu_kernels_test.c \
        -o $d/kernels -lm || return 1
    $d/kernels > $d/out.txt && { echo "the planted order passed"; return 1; }
    grep "FAIL" $d/out.txt
    grep -q "^FAIL sum, dot, exp-sum, max: the specified order's bits" $d/out.txt || return 1
    mpicc $(make -s --no-print-directory cpu-cflags) -ffp-contract=fast -o $d/train_contracted train_gpt2.c -lm || return 1
    local out
    out=$($d/train_contracted -h 2>&1) && { echo "the contracted build started"; return 1; }
    echo "$out"
    [ "$out" = "error: train_gpt2cpu was compiled with floating-point contraction: build it with -ffp-contract=off, as make does (docs/design.md, \"The same bits on every host\")" ]
}

check cpu_kernels_native cpuk_kernels
check cpu_kernels_order_plant cpuk_order_plant
# native picks one of these on an AVX-512 host (8x16 of 256-bit on Zen 4, 12x32 elsewhere): both are tested
check cpu_kernels_12x32 cpuk_kernels -DGEMM_VW=16 -DGEMM_MR=12
check cpu_kernels_8x16 cpuk_kernels -DGEMM_VW=8 -DGEMM_MR=8
check cpu_kernels_avx2 cpuk_kernels -mno-avx512f
check cpu_kernels_sse cpuk_kernels -mno-avx
check cpu_odd_sizes_vs_pytorch cpuk_odd_reference
check cpu_losses_thread_independent cpuk_thread_determinism
# The CPU benchmark's choice of PyTorch's OpenBLAS core, on made-up probe results.
check cpu_bench_blas_choice /usr/bin/python3 dev/bench/test_cpu_bench.py
