# Multi-GPU checks of the CUDA trainer through the emulator (sourced by dev/run_tests.sh): each
# emulated GPU is an MPI rank (mpirun --oversubscribe; the emulated NCCL runs on its own sockets).
# Equivalence with the CPU trainer for 1/2/4 GPUs, ZeRO 0/1/2 and a 2 x 2 mesh (FP32 within 1e-4,
# BF16 within the stated tolerance), printed memory/communication against closed forms and the bytes
# NCCL moved, the mpi/fs/tcp start-ups, val loss and a sharded resume, a failing rank, a broken
# stage 2 that must fail, and -ls (the replicas' outer syncs). See dev/test_multi_gpu.py. The
# checked builds (emucc --check) prove the stream order of the per-layer reduce-scatters and
# parameter all-gathers, each with a mutant --check must catch. Every good run lands in the goldens'
# ledger, compared bit for bit after the last of them (dev/test_golden.py).
/usr/bin/python3 dev/test_golden.py reset multi_gpu
check multi_gpu_build bash -c "make -s -j2 -f dev/gpu.mk build/gpu/train_gpt2emu_fp32 build/gpu/train_gpt2emu_bf16 build/gpu/gpu_memory_bf16 &&
    make -s train_gpt2cpu"
check multi_gpu_equivalence_fp32 /usr/bin/python3 dev/test_multi_gpu.py equivalence fp32
check multi_gpu_equivalence_bf16 /usr/bin/python3 dev/test_multi_gpu.py equivalence bf16
check multi_gpu_stage2_layer_slots /usr/bin/python3 dev/test_multi_gpu.py stage2_slots
check multi_gpu_val_loss_and_resume /usr/bin/python3 dev/test_multi_gpu.py resume
# a 2-rank ZeRO-1 checkpoint of the emulated GPU trainer resumed on 1 rank ZeRO 0 and 2 ranks ZeRO 2
# (dev/test_resilience.py layout, docs/checkpoints.md)
check multi_gpu_resume_on_other_layouts env TRAINER=build/gpu/train_gpt2emu_fp32 /usr/bin/python3 dev/test_resilience.py layout
# rank 1's checkpoint fails as on a full disk: the run goes on, nothing of that step remains, the
# checkpoints around it resume bit for bit (dev/test_resilience.py diskfull)
check multi_gpu_checkpoint_disk_full env TRAINER=build/gpu/train_gpt2emu_fp32 bash -c "make -s ckpt_tool &&
    /usr/bin/python3 dev/test_resilience.py diskfull"
check multi_gpu_accounting /usr/bin/python3 dev/test_multi_gpu.py accounting
check multi_gpu_startup_mpi_fs_tcp /usr/bin/python3 dev/test_multi_gpu.py startup
check multi_gpu_failing_rank /usr/bin/python3 dev/test_multi_gpu.py failures
check multi_gpu_broken_stage2_fails /usr/bin/python3 dev/test_multi_gpu.py mutant
# -ls (DiLoCo outer syncs): 2 x 2 ZeRO 1 and 2 x 1 ZeRO 0 against the CPU trainer on the same ranks,
# the bytes of a step without and with a sync, BF16 on 2 x 1 ZeRO 1, a resume inside a window
check multi_gpu_diloco /usr/bin/python3 dev/test_multi_gpu.py diloco

# -rq, -lf, -lo on the GPU (llmc/wire_kernels.cuh; dev/test_multi_gpu.py diloco_wire*): on 2 x 2,
# -ls 3 with -rq int8, -lf 2, and -lf 2 -lo 1 -rq int8 against the CPU trainer on the same flags
# (losses over 3 windows and final weights within 1e-4; int8's bytes per sync as the CPU's line and
# as the emulated NCCL sent them); a resume inside an -rq int8 window bit for bit; and a planted bug,
# a copy of the trainer whose messages never get the residual added, that the CPU comparison must catch.
check_bg multi_gpu_diloco_wire /usr/bin/python3 dev/test_multi_gpu.py diloco_wire
multi_gpu_diloco_wire_resume() {
    local d=build/multi_gpu/wire_mutant_src
    rm -rf $d && mkdir -p $d && cp -r train_gpt2.cu llmc $d/ || return 1
    sed -i 's/msg\[i\] = res ? __fadd_rn(d, res\[i\]) : d;/msg[i] = d;/' $d/llmc/outer_kernels.cuh
    grep -q "msg\[i\] = d;" $d/llmc/outer_kernels.cuh || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o $d/train_mutant $d/train_gpt2.cu -lnccl || return 1
    /usr/bin/python3 dev/test_multi_gpu.py diloco_wire_resume $d/train_mutant
}
check_bg multi_gpu_diloco_wire_resume multi_gpu_diloco_wire_resume
# -rq on more than 2 replicas (ncclSend/ncclRecv to each slice's owner, an all-gather of the owners'
# encoded sums): int8 on 4 x 1 and on 3 x 1 (uneven slices) against the CPU trainer, losses and
# weights within 1e-4, the bytes line the CPU's and what the emulated NCCL sent (about 40 s)
check_bg multi_gpu_diloco_wire_replicas /usr/bin/python3 dev/test_multi_gpu.py diloco_wire_replicas
# -ls 0 -rq and -rk on the GPU (dev/test_multi_gpu.py sync_wire): on 2 x 1, -ls 0 -rq int8 (ZeRO 1),
# -ls 0 -rq bf16 -rk 0.05 -rqs 1 (ZeRO 0) and -ls 3 -rq int4 -rk 0.05 (ZeRO 2) against the CPU trainer
# on the same flags (losses within 1e-4, weights as the CPU-vs-reference bounds, the replica bytes
# line); the -ls 0 -rq int8 checkpoint at step 2: state files in the CPU's layout with its residual,
# resumed bit for bit (about 55 s).
check_bg multi_gpu_sync_wire /usr/bin/python3 dev/test_multi_gpu.py sync_wire
# -rk's kernels (llmc/wire_kernels.cuh) standalone under --check: every format, slices of 1 to 2
# chunks and a bit, values with planted magnitude ties, and the shared vector of edge cases (NaN,
# infinities, -0, denormals, exact ties, blocks of NaNs and of denormals), dense and top-k, against
# llmc/wire_format.h bit for bit (encodings, residuals, decodings, an owner's sum over 2 replicas); and
# a planted bug, a copy whose tie rule keeps one tied value too few, that must fail.
wire_topk_kernels() {
    local d=build/multi_gpu/topk_mutant
    make -s -f dev/gpu.mk build/gpu/dev_cuda_wire_topk || return 1
    EMU_SCHED=random:3 build/gpu/dev_cuda_wire_topk > build/multi_gpu/wire_topk.txt || { cat build/multi_gpu/wire_topk.txt; return 1; }
    grep -c "^ok" build/multi_gpu/wire_topk.txt
    rm -rf $d && mkdir -p $d/dev/cuda $d/llmc && cp dev/cuda/wire_topk.cu dev/cuda/common.cuh dev/cuda/copies.cuh $d/dev/cuda/ &&
        cp llmc/* $d/llmc/ || return 1
    sed -i 's/(m == T \&\& tie++ < need)/(m == T \&\& tie++ + 1 < need)/g' $d/llmc/wire_kernels.cuh
    grep -q "tie++ + 1 < need" $d/llmc/wire_kernels.cuh || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc -O1 -o $d/t $d/dev/cuda/wire_topk.cu || return 1
    if $d/t > $d/out.txt; then echo "the wrong tie rule passed"; return 1; fi
    echo "the wrong tie rule: $(grep -c ^FAIL $d/out.txt) failing cases (caught)"
}
check_bg multi_gpu_wire_topk_kernels wire_topk_kernels
# the replica sync's guards on the GPU trainer (dev/test_diloco.py guards: a non-finite pseudo-gradient
# skips the sync on every replica, residual and outer state kept; a replica's own non-finite gradient
# skips its update alone and says so), about 3 minutes
check_bg multi_gpu_guards /usr/bin/python3 dev/test_diloco.py guards build/gpu/train_gpt2emu_fp32
check_wait
# -lo tau hides tau steps on the GPU (fix (a) of issue 35), judged by the trainer's counter of the time
# stream 0 waits on replica exchanges under a modelled link (-rb): -lo 1 at most a tenth of blocking
# -lo 0's with the exchange at 0.4 of a step, -lo 2 likewise at 1.1 (about 2 minutes)
check diloco_overlap_link_gpu /usr/bin/python3 dev/test_diloco.py overlap build/gpu/train_gpt2emu_fp32
# the 8 x 4 mesh: 32 emulated GPUs (ZeRO 1; ZeRO 2 with -ls 2 -rq int8) against the CPU trainer (about 50 s)
check multi_gpu_mesh_8x4 /usr/bin/python3 dev/test_multi_gpu.py mesh84
# the runs above against dev/tests/golden/multi_gpu.txt: losses, records, model and state files bit for bit
check multi_gpu_golden /usr/bin/python3 dev/test_golden.py check multi_gpu

# -op 1 on the emulated GPU trainer (CUDA events, llmc/op_events.cuh), on 1 rank and on 2 ranks with
# ZeRO 1: every family, the rows adding up to the step within 5%, the communication stream beside
# them, its bytes those the emulated NCCL sent, -op 0 writing the same main.log and model
# (dev/test_op_profile.py --gpu); and a planted bug it must catch: the communication stream's spans
# counted in the rows, where they overlap stream 0's, so that the families add up to more than the step.
check gpu_op_profile /usr/bin/python3 dev/test_op_profile.py build/multi_gpu/op_profile build/gpu/train_gpt2emu_fp32 \
    1 2 --gpu
gpu_op_profile_counted_twice() {
    local d=build/multi_gpu/op_profile_mutant
    rm -rf $d && mkdir -p $d/llmc && cp train_gpt2.cu $d/ && cp llmc/* $d/llmc/ || return 1
    sed -i 's/if (s->stream == 0) {/if (1) {/' $d/llmc/op_events.cuh
    grep -q "if (1) {" $d/llmc/op_events.cuh || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o $d/train_mutant $d/train_gpt2.cu -lnccl || return 1
    if /usr/bin/python3 dev/test_op_profile.py $d/work $d/train_mutant 2 --gpu --only-op1 > $d/out.txt 2>&1; then
        echo "the communication stream counted in the rows passed"; return 1
    fi
    grep "^FAIL" $d/out.txt
    grep -q "^FAIL families .* (nothing counted twice)" $d/out.txt
}
check gpu_op_profile_counted_twice_fails gpu_op_profile_counted_twice

# The trainer built with emucc --check (races, stream order, memory; dev/cuda_emu/README.md): FP32 and
# BF16 on 1 and 2 emulated GPUs, under the reverse and random:4 schedules (on 2 GPUs ZeRO 2 with its
# communication stream in FP32, ZeRO 1 in BF16), 3 steps of the same global batch: no report, and the
# CPU trainer's losses (FP32 within 1e-4, BF16 within 3e-3).
MGC_DIR=build/multi_gpu/checked
MGC_FLAGS="-e d2 -V 257 -sl 64 -i data/kjv/kjv_train.bin -j '' -b 2 -t 32 -d 256 -x 3 -l 1e-3 -c 0.1 -s 0 -sf 1"

# checked_run PREC NP SCHED: one checked run (ZeRO 2 for 2 GPUs under random, ZeRO 1 otherwise);
# fails on a --check report.
checked_run() {
    local prec=$1 np=$2 sched=$3 run z=1
    run=${prec}_np${np}_${sched%%:*}
    [ $np = 2 ] && [ ${sched%%:*} = random ] && z=2
    echo "$prec, $np emulated GPU(s), ZeRO $z, EMU_SCHED=$sched"
    EMU_SCHED=$sched eval mpirun --allow-run-as-root --oversubscribe -np $np -x EMU_SCHED \
        build/gpu/train_gpt2emu_${prec}_check $MGC_FLAGS -z $z -o $MGC_DIR/$run > $MGC_DIR/$run.out 2>&1 ||
        { tail -20 $MGC_DIR/$run.out; return 1; }
    ! grep "cuda_emu --check" $MGC_DIR/$run.out
}

multi_gpu_checked() {
    local d=$MGC_DIR prec sched a b
    rm -rf $d && mkdir -p $d
    eval ./train_gpt2cpu $MGC_FLAGS -o $d/cpu > $d/cpu.out || { cat $d/cpu.out; return 1; }
    # each precision once on one GPU and once on two, under the other schedule there (ZeRO 2 with its
    # communication stream in FP32, ZeRO 1 in BF16); the one-GPU runs take one core each: side by side
    checked_run fp32 1 reverse & a=$!
    checked_run bf16 1 random:4 & b=$!
    wait $a; a=$?
    wait $b; b=$?
    [ $a = 0 ] && [ $b = 0 ] || return 1
    checked_run fp32 2 random:4 && checked_run bf16 2 reverse || return 1
    python3 - $d <<'PY'
import glob, os, re, sys
d = sys.argv[1]
def losses(path):
    return [float(x) for x in re.findall(r"^s:\d+ trl:(\S+)", open(path).read(), re.M)]
cpu = losses(d + "/cpu/main.log")
ok = len(cpu) == 3
for run in sorted(glob.glob(d + "/*_np*")):
    if not os.path.isdir(run):
        continue
    got, tol = losses(run + "/main.log"), 1e-4 if "fp32" in run else 3e-3
    worst = max(abs(a - b) for a, b in zip(got, cpu)) if len(got) == len(cpu) else float("inf")
    print("%-24s losses %s  max |diff| vs CPU %.2e (tolerance %g)" % (os.path.basename(run), got, worst, tol))
    ok &= worst <= tol
sys.exit(0 if ok else 1)
PY
}
check multi_gpu_checked_build bash -c "make -s -j2 -f dev/gpu.mk build/gpu/train_gpt2emu_fp32_check build/gpu/train_gpt2emu_bf16_check &&
    make -s train_gpt2cpu"
check multi_gpu_checked_fp32_bf16_1_2_ranks multi_gpu_checked
# -opt muon on the emulated GPU trainers against the CPU trainer (FP32 1e-4, BF16 5e-2), a BF16
# resume bit for bit, the checked builds above under three schedules (dev/test_muon.py gpu)
check gpu_muon /usr/bin/python3 dev/test_muon.py gpu
# -opt muon with ZeRO 1, 2 (each matrix owned whole): 2, 4 ranks and 2 x 2 meshes equal to one rank
# within 1e-5, the bytes as the closed form, resumes bit for bit and re-cut, two planted mutants
# caught, the --check build on 2 ranks (dev/test_muon.py gpu_shards)
check_bg gpu_muon_shards /usr/bin/python3 dev/test_muon.py gpu_shards
# the sharded Muon inside the replica sync: -ls 4 against train_gpt2.py, -lf 2 -lo 1, -ls 0 -rq bf16
# against the CPU trainer, BF16's master weights, two planted mutants caught (dev/test_muon.py gpu_muloco)
check_bg gpu_muon_muloco /usr/bin/python3 dev/test_muon.py gpu_muloco

# -ls through the checked FP32 build (the outer sync's kernels, its all-reduce on the communication
# stream, the CRC all-gather, a resume inside a window): 2 x 1 ZeRO 1 under reverse and 2 x 2 ZeRO 0
# (the sync sharded over the replica's ranks, the parameters all-gathered after it, which the next
# forward waits for layer by layer) under random:4, each run to step 4 with a checkpoint at step 3 and resumed from it: no --check
# report, and the resumed steps equal the uninterrupted ones (multi_gpu_checked_diloco NP DS Z SCHED
# [OUTER_FLAGS [DIR_SUFFIX]]).
multi_gpu_checked_diloco() {
    local np=$1 ds=$2 z=$3 sched=$4 outer=${5:-"-ls 2"} d=$MGC_DIR/diloco_np$1_z$3${6:-}
    local flags="$MGC_FLAGS -x 4 -z $z -ds $ds $outer -ol 0.7 -om 0.9 -n 3"
    rm -rf $d $d.part && mkdir -p $d.part
    EMU_SCHED=$sched eval mpirun --allow-run-as-root --oversubscribe -np $np -x EMU_SCHED \
        build/gpu/train_gpt2emu_fp32_check $flags -o $d > $d.out 2>&1 || { tail -20 $d.out; return 1; }
    cp $d/*_00000003* $d.part/
    EMU_SCHED=$sched eval mpirun --allow-run-as-root --oversubscribe -np $np -x EMU_SCHED \
        build/gpu/train_gpt2emu_fp32_check $flags -y 1 -o $d.part > $d.part.out 2>&1 || { tail -20 $d.part.out; return 1; }
    ! grep "cuda_emu --check" $d.out $d.part.out || return 1
    grep "^s:4 trl" $d/main.log $d.part/main.log
    [ "$(grep '^s:4 trl' $d/main.log)" = "$(grep '^s:4 trl' $d.part/main.log)" ] && cmp $d/model_final.bin $d.part/model_final.bin
}
check_bg multi_gpu_checked_diloco_2x1_reverse multi_gpu_checked_diloco 2 1 1 reverse
check_bg multi_gpu_checked_diloco_2x2_random multi_gpu_checked_diloco 4 2 0 random:4
# -lo 2's chunks (two steps per exchange, fragments in flight, int8 phases) and a checkpoint at step 3
# with an exchange in flight (its chunks issued at once), resumed
check_bg multi_gpu_checked_diloco_lo2_random multi_gpu_checked_diloco 2 1 1 random:4 "-ls 3 -lf 2 -lo 2 -rq int8" _lo2
check_wait

# A checked 2-rank run of train_gpt2.cu with one line of the data-parallel layer
# (llmc/dp_device.cuh) replaced by a comment (checked_mutant DIR SED_PATTERN ZERO_STAGE [MORE_FLAGS
# [REPORT]]): it must fail with a --check report (by default of unordered stream operations), which
# goes to DIR/report.txt. Such checks compile on one core each: side by side.
checked_mutant() {
    local d=$1 pattern=$2 stage=$3 more=${4:-} want=${5:-"cuda_emu --check: unordered stream operations"}
    rm -rf $d && mkdir -p $d && cp -r train_gpt2.cu llmc $d/ || return 1
    sed -i "s/$pattern/    \/\/ mutant: no wait/" $d/llmc/dp_device.cuh
    grep -q "mutant: no wait" $d/llmc/dp_device.cuh || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc --check -O1 -DENABLE_FP32 -o $d/train_mutant $d/train_gpt2.cu -lnccl || return 1
    if mpirun --allow-run-as-root --oversubscribe -np 2 $d/train_mutant -e d2 -V 257 -sl 64 -i data/kjv/kjv_train.bin \
        -j '' -b 2 -t 32 -d 256 -x 2 -l 1e-3 -s 0 -sf 1 -z $stage $more -o $d/out > $d/out.txt 2>&1; then
        echo "the missing wait passed"; return 1
    fi
    grep -m1 -A3 "$want" $d/out.txt | tee $d/report.txt
    [ -s $d/report.txt ]
}

# The test of that test: without the cudaStreamWaitEvent that orders the communication stream after
# the gradients (ZeRO 2), --check must report the reduce-scatter reading what a kernel on stream 0 wrote.
multi_gpu_checked_stream_mutant() {
    checked_mutant build/multi_gpu/checked_mutant '    device_link_order_on_comm(&dp->link); \/\/ after the layer' 2
}
check_bg multi_gpu_checked_detects_missing_stream_wait multi_gpu_checked_stream_mutant

# The same for the ZeRO parameter all-gathers (comm_stream, one event per layer): a forward that does
# not wait for a layer's event must be reported by --check as reading what the all-gather writes.
multi_gpu_checked_allgather_mutant() {
    checked_mutant build/multi_gpu/checked_allgather_mutant \
        '        OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(\&dp->link, \&dp->link.params_ready\[layer + 1\]));' 1 &&
        grep -q "write by ncclAllGather" build/multi_gpu/checked_allgather_mutant/report.txt
}
check_bg multi_gpu_checked_detects_missing_allgather_wait multi_gpu_checked_allgather_mutant

# The order of collectives across communicators (train_gpt2.cu, "The order of collectives"): with
# the world all-reduce not ordered after the shard group's parameter all-gathers (a checkpoint's
# barrier on rank 1, which does not write the model), --check must report the two collectives.
multi_gpu_checked_collective_order_mutant() {
    checked_mutant build/multi_gpu/checked_order_mutant \
        '    device_link_order_on_main(&dp->link); \/\/ e.g. after the shard group.s parameter all-gathers, on every rank' 1 "-n 1" \
        "cuda_emu --check: collectives on two communicators that nothing orders"
}
check_bg multi_gpu_checked_detects_unordered_collectives multi_gpu_checked_collective_order_mutant

# One visible GPU per rank (CUDA_VISIBLE_DEVICES = the local rank, as srun --gpus-per-task=1 sets
# it): each rank sees one emulated GPU and takes GPU 0; 2 ranks ZeRO 1 start and train 2 steps.
multi_gpu_one_visible_device() {
    local d=build/multi_gpu/one_visible
    rm -rf $d && mkdir -p $d
    mpirun --allow-run-as-root --oversubscribe -np 2 bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"' \
        _ build/gpu/train_gpt2emu_fp32 -e d2 -V 257 -sl 64 -i data/kjv/kjv_train.bin -j '' -b 2 -t 32 -d 128 -x 2 \
        -l 1e-3 -s 0 -z 1 -o $d/run > $d/out.txt 2>&1 || { tail -20 $d/out.txt; return 1; }
    grep "GPU 0 of 1 visible" $d/out.txt && grep "^s:2 trl:" $d/run/main.log
}
check multi_gpu_one_visible_device multi_gpu_one_visible_device
# A peer that stops answering in a step's forward, in the checkpoint write, in a HellaSwag
# evaluation: the other rank exits non-zero on its own with a line naming the step, the phase and the
# peer (ncclRemoteError), and with detection off within the wait's limit (dev/test_peer_stops.py;
# about 45 s, mostly waiting, in the foreground since it asserts times).
check multi_gpu_peer_stops /usr/bin/python3 dev/test_peer_stops.py build/multi_gpu/peer_stops build/gpu/train_gpt2emu_fp32
