# Work started now for checks that collect it later (sourced by dev/run_tests.sh; `early`, at nice
# 19): the nvcc builds, about 300 s of one core on the 2-core host, which the CPU checks of 10_ to
# 45_ leave room for (the emulator tests' own nvcc build as well: 20_ keeps both cores busy with
# its emucc builds). Their commands are repeated where they are collected (early_result, which
# runs them itself in a filtered run); nothing else builds into their outputs before that.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    early emu_nvcc make -s -j2 -f dev/cuda_emu/emu.mk emu-nvcc
fi
early gpu_nvcc make -s -f dev/gpu.mk gpu-nvcc-check
early gpu_cudnn_nvcc make -s -j2 -f dev/gpu.mk build/gpu/train_gpt2_cudnn build/gpu/attention_cudnn
