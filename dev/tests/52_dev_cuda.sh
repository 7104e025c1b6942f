# dev/cuda/ (sourced by dev/run_tests.sh): each kernel family's standalone file, built through the
# CUDA emulator with --check and run under the forward, reverse and random schedules: every version
# against its CPU reference (and, for AdamW, the multi-tensor launch against the per-tensor one bit
# for bit), no --check report; the timing loops say "no GPU: correctness only". The LayerNorm
# backward and the bias gradient print a hash of their output bits ("bits" lines): the lines must be
# the same under the three schedules (their sums run in a fixed order whatever order the blocks run).
mkdir -p build/test_tmp
check dev_cuda_emu_build make -s -f dev/gpu.mk -j2 build/gpu/dev_cuda_layernorm build/gpu/dev_cuda_classifier \
    build/gpu/dev_cuda_encoder build/gpu/dev_cuda_matmul build/gpu/dev_cuda_adamw
for family in layernorm classifier encoder matmul adamw; do
    check dev_cuda_$family bash -c "for s in forward reverse random:3; do
        EMU_SCHED=\$s build/gpu/dev_cuda_$family > build/test_tmp/dev_cuda_$family.\${s%:*}.txt ||
            { cat build/test_tmp/dev_cuda_$family.\${s%:*}.txt; exit 1; }
        grep '^bits' build/test_tmp/dev_cuda_$family.\${s%:*}.txt > build/test_tmp/dev_cuda_$family.\${s%:*}.bits; done
        tail -n 3 build/test_tmp/dev_cuda_$family.forward.txt
        cmp build/test_tmp/dev_cuda_$family.forward.bits build/test_tmp/dev_cuda_$family.reverse.bits &&
            cmp build/test_tmp/dev_cuda_$family.forward.bits build/test_tmp/dev_cuda_$family.random.bits &&
            echo \"\$(wc -l < build/test_tmp/dev_cuda_$family.forward.bits) bits lines equal under the three schedules\""
done
# The bits check must fail on a sum whose order follows the schedule: colsum_finish with its lanes
# added by atomicAdd (-DCOLSUM_PLANT_UNORDERED) gives other bits under the reverse or random schedule.
dev_cuda_bits_catch_planted() {
    local s
    make -s -f dev/gpu.mk build/gpu/dev_cuda_layernorm_unordered || return 1
    for s in forward reverse random:3; do
        EMU_SCHED=$s build/gpu/dev_cuda_layernorm_unordered | grep '^bits' > build/test_tmp/dev_cuda_unordered.${s%:*}.bits
    done
    if cmp -s build/test_tmp/dev_cuda_unordered.forward.bits build/test_tmp/dev_cuda_unordered.reverse.bits &&
        cmp -s build/test_tmp/dev_cuda_unordered.forward.bits build/test_tmp/dev_cuda_unordered.random.bits; then
        echo "the unordered sum gave the same bits under every schedule"; return 1
    fi
    diff build/test_tmp/dev_cuda_unordered.forward.bits build/test_tmp/dev_cuda_unordered.random.bits | head -4
    return 0
}
check dev_cuda_bits_catch_planted dev_cuda_bits_catch_planted
