# dev/cuda/ (sourced by dev/run_tests.sh): each kernel family's standalone file, built through the
# CUDA emulator with --check and run under the forward, reverse and random schedules: every version
# against its CPU reference (and, for AdamW, the multi-tensor launch against the per-tensor one bit
# for bit), no --check report; the timing loops say "no GPU: correctness only".
check dev_cuda_emu_build make -s -f dev/gpu.mk -j2 build/gpu/dev_cuda_layernorm build/gpu/dev_cuda_classifier \
    build/gpu/dev_cuda_encoder build/gpu/dev_cuda_matmul build/gpu/dev_cuda_adamw
for family in layernorm classifier encoder matmul adamw; do
    check dev_cuda_$family bash -c "for s in forward reverse random:3; do
        EMU_SCHED=\$s build/gpu/dev_cuda_$family || exit 1; done"
done
