# llmc/attention_fa2.cuh and attention_fa2_backward.cuh, the mma.sync/ldmatrix/cp.async attention
# (sourced by dev/run_tests.sh after 50_gpu_trainer.sh, whose gpu_emu_build made
# build/gpu/attention_emu and attention_emu_check): against the double reference at GPT-2 124M's
# layer, and under emucc --check at odd T and T < 64 under three schedules, with 1-way bank conflicts
# at every ldmatrix and shared store site; four planted bugs it must catch, each on one small shape;
# its nvcc SASS, spills and registers, and the performance model's counts against that SASS and the
# emulator's bank counts. 52 to 56 s of CPU in six checks run two at a time, 68 to 71 s with the
# three planted builds rebuilt (measured on the shared 2-core machine; docs/gpu.md, "Tests").
FA2_TMP=build/test_tmp/fa2
mkdir -p $FA2_TMP

# The --fa2-quick run (T 77, 130, 17, 1 at head size 64, T 77, 130, 17 at 128 and 32, forward and backward) under --check, forward schedule;
# every ldmatrix and explicit shared-store site of the two kernels reports 1-way bank conflicts (37
# sites over the head sizes 32, 64, 128).
fa2_checked_banks() {
    build/gpu/attention_emu_check --fa2-quick 2> $FA2_TMP/banks.txt || { cat $FA2_TMP/banks.txt; return 1; }
    grep "banks: kernel attention_[a-z_]*fa2_kernel" $FA2_TMP/banks.txt | tee $FA2_TMP/fa2_banks.txt
    [ "$(grep -c ', 1-way worst' $FA2_TMP/fa2_banks.txt)" -eq 37 ] && [ "$(wc -l < $FA2_TMP/fa2_banks.txt)" -eq 37 ] &&
        /usr/bin/python3 dev/bench/gpu_model.py --check-banks $FA2_TMP/banks.txt
}
# The planted bugs, each on one small shape (three builds: the mask and the atomic dq share one): an
# off-by-one mask fails the reference comparison (T 77);
# a last tile read before its cp.async wait (forward) is reported by --check (exit 66); unswizzled
# tiles make every site 4- or 8-way (--fa2-tiny: T 77 at each head size reaches all 37 sites); dq
# summed by atomicAdd over one block per key tile in whatever order the blocks run (FlashAttention-2's
# split, -DFA2_PLANT_ATOMIC_DQ) gives a rerun with other bits under a random block order (--fa2-order:
# T 512, 8 key tiles), where the real kernel's rerun is bitwise equal.
fa2_plants() {
    local rc
    make -s -j2 -f dev/gpu.mk build/gpu/attention_emu_fa2_mask_atomic build/gpu/attention_emu_fa2_nowait \
        build/gpu/attention_emu_fa2_noswizzle || return 1
    if build/gpu/attention_emu_fa2_mask_atomic --fa2-case 1 77 1 64 > $FA2_TMP/mask.txt; then echo "the wrong mask passed"; return 1; fi
    grep "FAIL   out" $FA2_TMP/mask.txt || return 1
    build/gpu/attention_emu_fa2_nowait --fa2-case 1 77 1 64 > $FA2_TMP/nowait.txt 2>&1
    rc=$?
    [ $rc -eq 66 ] || { echo "the missing cp.async wait: exit $rc, not 66"; return 1; }
    grep -m1 "read of bytes in flight in kernel attention_forward_fa2_kernel" $FA2_TMP/nowait.txt || return 1
    build/gpu/attention_emu_fa2_noswizzle --fa2-tiny 2> $FA2_TMP/noswizzle.txt > /dev/null || return 1
    grep "banks: kernel attention_[a-z_]*fa2_kernel" $FA2_TMP/noswizzle.txt | tee $FA2_TMP/noswizzle_banks.txt
    # head size 32's rows are 64 bytes: 4-way there, 8-way elsewhere
    [ "$(grep -c ', 8-way worst' $FA2_TMP/noswizzle_banks.txt)" -eq 25 ] &&
        [ "$(grep -c ', 4-way worst' $FA2_TMP/noswizzle_banks.txt)" -eq 12 ] || return 1
    ! /usr/bin/python3 dev/bench/gpu_model.py --check-banks $FA2_TMP/noswizzle.txt || { echo "the model took 8-way as 1-way"; return 1; }
    EMU_SCHED=random:1 build/gpu/attention_emu --fa2-order > $FA2_TMP/order.txt || { cat $FA2_TMP/order.txt; return 1; }
    if EMU_SCHED=random:1 build/gpu/attention_emu_fa2_mask_atomic --fa2-order > $FA2_TMP/atomic.txt; then
        echo "the unordered atomicAdd dq passed"; return 1
    fi
    grep "FAIL   rerun dqkv bits differ" $FA2_TMP/atomic.txt
}
# T 1024 (16 key tiles; forward only, NH 2) and T 77 at GPT-2 124M's C 768, NH 12 (forward and
# backward), plain build (a checked one takes 2 minutes); the reverse and random schedules on --fa2-sched's smaller set
# (T 130 and 17 at each head size; --fa2-quick's full set runs under the forward schedule above)
check_bg attention_fa2_T1024 build/gpu/attention_emu --fa2
check_bg attention_fa2_checked_banks fa2_checked_banks
check_bg attention_fa2_checked_reverse_random bash -c "EMU_SCHED=reverse build/gpu/attention_emu_check --fa2-sched &&
    EMU_SCHED=random:5 build/gpu/attention_emu_check --fa2-sched"
check_bg attention_fa2_planted_bugs fa2_plants
# The trainer's path at head sizes 128 (C 128, 1 head) and 32 (C 64, 2 heads): test_gpt2emu_bf16
# (--check, built by 50_gpu_trainer.sh) against PyTorch, one batch (-k 0), T 80
fa2_trainer_hs() {
    local c h g
    for c_h in 128:1 64:2; do
        c=${c_h%:*} h=${c_h#*:} g=$FA2_TMP/ref_c${c}_h$h
        mkdir -p $g && /usr/bin/python3 train_gpt2.py --model d2 --channels $c --heads $h --vocab 257 --max-seq 128 \
            --seed 2 --write-model $g/model.bin --data data/kjv/kjv_val.bin --B 2 --T 80 --write-state $g/state.bin \
            --steps 10 --write-losses $g/losses.txt > $g/ref.log || { tail -3 $g/ref.log; return 1; }
        build/gpu/test_gpt2emu_bf16 $g/model.bin $g/state.bin $g/losses.txt data/kjv/kjv_val.bin -k 0 \
            > $g/out.txt 2> $g/stderr.txt || { cat $g/out.txt; tail -5 $g/stderr.txt; return 1; }
        grep -E "attention:|logits|passed" $g/out.txt
        grep -q "attention: tensor-core flash attention (mma.sync" $g/out.txt || return 1
    done
}
check_bg attention_fa2_trainer_hs128_hs32 fa2_trainer_hs
# The SASS check; the performance model's mma.sync counts (dev/bench/gpu_model.py FA2_SASS) against
# that SASS, and two planted model errors (the backward with 4 tile matmuls; no wave quantisation of
# its one-block-per-head grid), each caught by test_gpu_model.py, the first by the SASS recount too;
# the SASS check's own plants, built for sm_80 only: 8 blocks per SM (64 registers) must spill in the
# forward, and a local array in the head-size-128 backward (-DFA2_PLANT_SPILL) must fail it there.
fa2_sass() {
    local d=$FA2_TMP/model_mutant m
    bash dev/cuda/check_attention_fa2_sass.sh || return 1
    /usr/bin/python3 dev/bench/gpu_model.py --check-sass build/gpu/fa2_sass/attention_sm90.cubin \
        build/gpu/fa2_sass/ptxas_sm90.log > $FA2_TMP/model_sass.txt || { grep -v "^ok" $FA2_TMP/model_sass.txt; return 1; }
    echo "model counts against the SASS: $(grep -c "^ok" $FA2_TMP/model_sass.txt) agree"
    for m in 's/"loop": {"HMMA": 160,/"loop": {"HMMA": 128,/' 's/blocks \/ g\["sms"\]) \/ -(-blocks \/\/ g\["sms"\])/1.0)/'; do
        rm -rf $d && mkdir -p $d && sed "$m" dev/bench/gpu_model.py > $d/gpu_model.py || return 1
        cmp -s dev/bench/gpu_model.py $d/gpu_model.py && { echo "mutation not applied: $m"; return 1; }
        if GPU_MODEL_DIR=$d /usr/bin/python3 dev/bench/test_gpu_model.py > $d/out.txt; then echo "NOT caught: $m"; return 1; fi
        echo "caught: $m ($(grep -c '^FAIL' $d/out.txt) checks failed)"
        if [ "${m:0:8}" = 's/"loop"' ] && /usr/bin/python3 $d/gpu_model.py --check-sass build/gpu/fa2_sass/attention_sm90.cubin \
            > $d/sass.txt; then echo "the SASS recount missed it"; return 1; fi
    done
    ! FA2_SASS_ARCHS=80 FA2_SASS_EXTRA="-DFA2_MIN_BLOCKS=8 -DFA2_PLANT_SPILL" bash dev/cuda/check_attention_fa2_sass.sh \
        > $FA2_TMP/spill.txt || { echo "the planted spills passed"; return 1; }
    [ "$(grep -c "FAIL: stack frame or spills" $FA2_TMP/spill.txt)" -eq 4 ] &&
        grep -A1 "sm_80 attention_backward_fa2_kernelILi128E" $FA2_TMP/spill.txt | grep "FAIL: stack frame or spills"
}
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    check_bg attention_fa2_sass fa2_sass
else
    echo "SKIP attention_fa2_sass: no nvcc on this machine"
fi
