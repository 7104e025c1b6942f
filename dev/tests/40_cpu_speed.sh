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
    gcc -O3 -march=native -fopenmp -fno-math-errno -Wall -Wextra -Werror -Wno-unused-function -Illmc -DGEMM_SHARED_FLOATS=8192 \
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

check cpu_kernels_native cpuk_kernels
# native picks one of these on an AVX-512 host (8x16 of 256-bit on Zen 4, 12x32 elsewhere): both are tested
check cpu_kernels_12x32 cpuk_kernels -DGEMM_VW=16 -DGEMM_MR=12
check cpu_kernels_8x16 cpuk_kernels -DGEMM_VW=8 -DGEMM_MR=8
check cpu_kernels_avx2 cpuk_kernels -mno-avx512f
check cpu_kernels_sse cpuk_kernels -mno-avx
check cpu_odd_sizes_vs_pytorch cpuk_odd_reference
check cpu_losses_thread_independent cpuk_thread_determinism
# The CPU benchmark's choice of PyTorch's OpenBLAS core, on made-up probe results.
check cpu_bench_blas_choice /usr/bin/python3 dev/bench/test_cpu_bench.py
