# dev/tests/20_cuda_emu.sh: the CUDA emulator's checks (sourced by dev/run_tests.sh). Each test
# program compares emulated CUDA with a CPU computation; the ASan builds also catch out-of-bounds
# accesses in kernels; test_nccl runs as 1 to 4 MPI ranks (1 to 4 emulated GPUs; the emulated NCCL
# itself needs no MPI: check_nccl_elastic.sh starts its processes without mpirun).
emu_mpirun="mpirun --allow-run-as-root --oversubscribe"
check emu_build make -s -j2 -f dev/cuda_emu/emu.mk emu-tests
check emu_rewrite python3 dev/cuda_emu/tests/test_rewrite.py
check emu_plain_reduction build/cuda_emu/plain_reduction
check emu_wmma build/cuda_emu/test_wmma
# llmc/ptx.cuh (mma.sync m16n8k16, ldmatrix, cp.async) against naive loops at the documented layouts;
# a planted wrong lane mapping in the emulator's mma or ldmatrix must make the same test fail
check emu_ptx build/cuda_emu/test_ptx
check emu_ptx_catches_wrong_lane_map dev/cuda_emu/tests/check_ptx_plants.sh
for t in test_primitives test_bf16_errors test_cublaslt plain_reduction test_wmma test_ptx; do
    check "emu_${t#test_}_asan" build/cuda_emu/${t}_asan
done
check emu_primitives build/cuda_emu/test_primitives
check emu_primitives_ucontext build/cuda_emu/test_primitives_ucontext
check emu_two_units build/cuda_emu/two_units
for n in 1 2 3 4; do
    check emu_nccl_np$n $emu_mpirun -np $n build/cuda_emu/test_nccl
done
# Open MPI's own allocations are reported as leaks, so leak checking is off for the MPI runs
check emu_nccl_asan_np3 env ASAN_OPTIONS=detect_leaks=0 $emu_mpirun -np 3 -x ASAN_OPTIONS build/cuda_emu/test_nccl_asan
# The asynchronous emulated NCCL: a collective returns at once; a blocking call behind one whose
# peer stopped answering never returns; polling sees ncclRemoteError naming the peer (about 16 s,
# mostly waiting on timeouts, so in the background).
check_bg emu_nccl_async_peer_stops dev/cuda_emu/tests/check_peer_stops.sh
# ncclCommShrink(NCCL_SHRINK_ABORT) past a stopped peer, its stuck all-reduce abandoned; a planted
# emulator whose revoke abandons nothing must fail (dev/cuda_emu/tests/check_nccl_shrink.sh)
check_bg emu_nccl_shrink dev/cuda_emu/tests/check_nccl_shrink.sh
# No mpirun: 3 processes (the id through a file), one SIGKILLed; the two others see ncclRemoteError
# naming it, shrink, all-reduce, and take in a 4th process through a new ncclCommInitRank; a planted
# emulator whose ended connections are never reported must fail (dev/cuda_emu/tests/check_nccl_elastic.sh)
check_bg emu_nccl_elastic dev/cuda_emu/tests/check_nccl_elastic.sh
# Nonblocking communicators: ncclInProgress from init, split and collectives, polled out of; an init
# a rank never joins aborted; a call on a communicator that owes its poll must be reported
# (dev/cuda_emu/tests/check_nccl_nonblocking.sh)
check_bg emu_nccl_nonblocking dev/cuda_emu/tests/check_nccl_nonblocking.sh
check emu_asan_catches_oob dev/cuda_emu/tests/expect_asan_report.sh build/cuda_emu/oob_write_asan
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    check emu_tests_compile_with_nvcc early_result emu_nvcc make -s -j2 -f dev/cuda_emu/emu.mk emu-nvcc
    # the SASS of llmc/ptx.cuh's test kernels (sm_90, nvdisasm): HMMA.16816.F32.BF16, LDSM, LDGSTS
    if python3 dev/gpu_kernels/sass_report.py --find-nvdisasm >/dev/null 2>&1; then
        check emu_ptx_sass dev/cuda_emu/tests/check_ptx_sass.sh
    else
        echo "SKIP emu_ptx_sass: no nvdisasm (dev/install_deps.sh installs it)"
    fi
else
    echo "SKIP emu_tests_compile_with_nvcc: no nvcc on this machine"
fi
# emucc --check (dev/cuda_emu/README.md): the unit tests built checked pass with no report under three
# schedules; each program of dev/cuda_emu/tests/bugs holds one GPU bug that the plain emulator misses
# and --check catches, and its fixed twin passes --check silently (check_pair.sh says what is proven).
check emu_check_build make -s -j2 -f dev/cuda_emu/emu.mk emu-check emu-bugs
for sched in forward reverse random:1; do
    check "emu_check_units_$sched" bash -c "for t in test_primitives test_bf16_errors test_cublaslt plain_reduction test_wmma test_ptx; do
        EMU_SCHED=$sched build/cuda_emu/check/\$t || exit 1; done &&
        EMU_SCHED=$sched $emu_mpirun -np 3 -x EMU_SCHED build/cuda_emu/check/test_nccl"
done
# ncclSend/ncclRecv misuse: a count mismatch ends the run naming both counts; a receive buffer read
# with no wait is a --check race report, and the fixed twin passes (about 4 s)
check emu_nccl_p2p_plants dev/cuda_emu/tests/check_nccl_p2p.sh
# bank conflicts counted per access site: known 8-way and 2-way layouts reported as such, swizzled 1-way
check emu_check_counts_bank_conflicts dev/cuda_emu/tests/check_banks.sh
for bug in dev/cuda_emu/tests/bugs/*.cu; do
    bug=$(basename $bug .cu)
    check "emu_check_catches_$bug" dev/cuda_emu/tests/bugs/check_pair.sh $bug
done
# The strict rules (dev/cuda_emu/README.md, "The strict rules"): each program of
# dev/cuda_emu/tests/strict plants one bug a GPU cluster shows and the lenient emulator (EMU_STRICT=0)
# missed; the strict emulator must report it and pass its fixed twin (check_strict.sh).
check emu_strict_build make -s -j2 -f dev/cuda_emu/emu.mk emu-strict
for t in dev/cuda_emu/tests/strict/*.cu; do
    t=$(basename $t .cu)
    check "emu_strict_catches_$t" dev/cuda_emu/tests/strict/check_strict.sh $t
done
