# Multi-GPU checks of the CUDA trainer through the emulator (sourced by dev/run_tests.sh): each
# emulated GPU is an MPI rank and NCCL runs over MPI (mpirun --oversubscribe). Equivalence with the
# CPU trainer for 1/2/4 GPUs, ZeRO 0/1/2 and a 2 x 2 mesh (FP32 within 1e-4, BF16 within the stated
# tolerance), printed memory/communication against closed forms and the bytes NCCL moved, the
# mpi/fs/tcp start-ups, val loss and a sharded resume, a failing rank, and a broken stage 2 that
# must fail. See dev/test_multi_gpu.py.
check multi_gpu_build bash -c "make -s -f dev/gpu.mk build/gpu/train_gpt2emu_fp32 build/gpu/train_gpt2emu_bf16 build/gpu/gpu_memory_bf16 &&
    make -s train_gpt2cpu"
check multi_gpu_equivalence_fp32 /usr/bin/python3 dev/test_multi_gpu.py equivalence fp32
check multi_gpu_equivalence_bf16 /usr/bin/python3 dev/test_multi_gpu.py equivalence bf16
check multi_gpu_stage2_layer_slots /usr/bin/python3 dev/test_multi_gpu.py stage2_slots
check multi_gpu_val_loss_and_resume /usr/bin/python3 dev/test_multi_gpu.py resume
check multi_gpu_accounting /usr/bin/python3 dev/test_multi_gpu.py accounting
check multi_gpu_startup_mpi_fs_tcp /usr/bin/python3 dev/test_multi_gpu.py startup
check multi_gpu_failing_rank /usr/bin/python3 dev/test_multi_gpu.py failures
check multi_gpu_broken_stage2_fails /usr/bin/python3 dev/test_multi_gpu.py mutant
