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
# every ldmatrix and explicit shared-store site of the three kernels reports 1-way bank conflicts (45
# sites over the head sizes 32, 64, 128).
fa2_checked_banks() {
    build/gpu/attention_emu_check --fa2-quick 2> $FA2_TMP/banks.txt || { cat $FA2_TMP/banks.txt; return 1; }
    grep -E "banks: kernel attention_[a-z_]*fa2_(dq_|dkv_)?kernel" $FA2_TMP/banks.txt | tee $FA2_TMP/fa2_banks.txt
    [ "$(grep -c ', 1-way worst' $FA2_TMP/fa2_banks.txt)" -eq 45 ] && [ "$(wc -l < $FA2_TMP/fa2_banks.txt)" -eq 45 ] &&
        /usr/bin/python3 dev/bench/gpu_model.py --check-banks $FA2_TMP/banks.txt
}
# fa2_mutant DIR FILE SED-EXPRESSION...: a copy of llmc/ and dev/cuda/ in DIR with the expressions
# applied to FILE (a planted bug, never in the sources); fails when one changes nothing.
fa2_mutant() {
    local dir=$1 file=$2 expr
    shift 2
    rm -rf $dir && mkdir -p $dir/llmc $dir/dev/cuda && cp llmc/* $dir/llmc/ && cp dev/cuda/attention.cu dev/cuda/*.cuh $dir/dev/cuda/ ||
        return 1
    for expr in "$@"; do
        cp $dir/$file $dir/before
        sed -i "$expr" $dir/$file
        cmp -s $dir/before $dir/$file && { echo "the mutation did not apply: $expr"; return 1; }
    done
    return 0
}
# The planted bugs, each on one small shape, each in a patched copy of the sources: an off-by-one
# mask fails the reference comparison (T 77); a key tile loaded where the dq pass wants the next one,
# and a query tile where the dk/dv pass wants the next one (wrong tile indices, one build: neither can
# move the other's output), fail dq and dk/dv (T 200: four tiles); a last tile read before its
# cp.async wait (forward) is reported by --check (exit 66); unswizzled tiles make every site 4- or
# 8-way (--fa2-tiny: T 77 at each head size reaches all 45 sites); dq summed by atomicAdd over one
# block per (query tile, key tile) pair in whatever order the blocks run (FlashAttention-2's first
# split; test code in dev/cuda/attention.cu, --fa2-order-racy) gives a rerun with other bits under a
# random block order (T 512, 8 key tiles), where the real kernels' rerun is bitwise equal. The dq
# kernel's dynamic limit raised only above 48 KiB (the code before 77594b5: its 256 B static sD plus
# 48 KiB dynamic is over a GPU's 48 KiB default) is refused by the emulator's static shared memory rule
# at head size 64, naming the kernel.
fa2_plants() {
    local rc d=$FA2_TMP/plants
    fa2_mutant $d/mask llmc/attention_fa2.cuh 's/{ return att_visible(key, query); }/{ return key <= query + 1; }/' &&
        fa2_mutant $d/tile llmc/attention_fa2_backward.cuh 's/head + C, rs, (kb + 1) \* FA2_TILE, T);/head + C, rs, kb * FA2_TILE, T);/' \
            's/head, rs, q0 + FA2_TILE, T);/head, rs, q0, T);/' &&
        fa2_mutant $d/nowait llmc/attention_fa2.cuh 's/ptx_cp_async_wait<0>();/ptx_cp_async_wait<1>();/' &&
        fa2_mutant $d/noswizzle llmc/attention_fa2.cuh 's/int sw = D >= 64 ? (row \& 7) : ((row >> 1) \& 3);/int sw = 0;/' &&
        fa2_mutant $d/olddq llmc/attention_fa2_backward.cuh \
            's/^    cudaCheck(cudaFuncSetAttribute(kernel, \(.*\)));$/    if (bytes > 48 * 1024) { cudaCheck(cudaFuncSetAttribute(kernel, \1)); }/' ||
        return 1
    local cc="dev/cuda_emu/emucc -O1 -Xcompiler -Wall,-Wno-unused-function,-Wno-format-truncation"
    $cc -o $d/mask/attention $d/mask/dev/cuda/attention.cu & local p1=$!
    $cc -o $d/tile/attention $d/tile/dev/cuda/attention.cu & local p2=$!
    wait $p1 && wait $p2 || return 1
    $cc -o $d/olddq/attention $d/olddq/dev/cuda/attention.cu || return 1
    $cc --check -o $d/nowait/attention $d/nowait/dev/cuda/attention.cu & p1=$!
    $cc --check -o $d/noswizzle/attention $d/noswizzle/dev/cuda/attention.cu & p2=$!
    wait $p1 && wait $p2 || return 1
    if $d/mask/attention --fa2-case 1 77 1 64 > $FA2_TMP/mask.txt; then echo "the wrong mask passed"; return 1; fi
    grep "FAIL   out" $FA2_TMP/mask.txt || return 1
    if $d/tile/attention --fa2-case 1 200 1 64 > $FA2_TMP/tile.txt; then echo "the wrong tile indices passed"; return 1; fi
    grep -E "FAIL   (dq|dk|dv) " $FA2_TMP/tile.txt
    grep -q "FAIL   dq " $FA2_TMP/tile.txt && grep -qE "FAIL   (dk|dv) " $FA2_TMP/tile.txt || return 1
    if $d/olddq/attention --fa2-case 1 77 1 64 > $FA2_TMP/olddq.txt 2>&1; then echo "the old dq limit passed"; return 1; fi
    grep "a GPU refuses this launch (cudaErrorInvalidValue): kernel attention_backward_fa2_dq_kernel<64> has 256 bytes of static and 49152 of dynamic" \
        $FA2_TMP/olddq.txt || { tail -3 $FA2_TMP/olddq.txt; return 1; }
    $d/nowait/attention --fa2-case 1 77 1 64 > $FA2_TMP/nowait.txt 2>&1
    rc=$?
    [ $rc -eq 66 ] || { echo "the missing cp.async wait: exit $rc, not 66"; return 1; }
    grep -m1 "read of bytes in flight in kernel attention_forward_fa2_kernel" $FA2_TMP/nowait.txt || return 1
    $d/noswizzle/attention --fa2-tiny 2> $FA2_TMP/noswizzle.txt > /dev/null || return 1
    grep "banks: kernel attention_[a-z_]*fa2" $FA2_TMP/noswizzle.txt | tee $FA2_TMP/noswizzle_banks.txt
    # head size 32's rows are 64 bytes: 4-way there, 8-way elsewhere
    [ "$(grep -c ', 8-way worst' $FA2_TMP/noswizzle_banks.txt)" -eq 27 ] &&
        [ "$(grep -c ', 4-way worst' $FA2_TMP/noswizzle_banks.txt)" -eq 18 ] || return 1
    ! /usr/bin/python3 dev/bench/gpu_model.py --check-banks $FA2_TMP/noswizzle.txt || { echo "the model took 8-way as 1-way"; return 1; }
    EMU_SCHED=random:1 build/gpu/attention_emu --fa2-order > $FA2_TMP/order.txt || { cat $FA2_TMP/order.txt; return 1; }
    if EMU_SCHED=random:1 build/gpu/attention_emu --fa2-order-racy > $FA2_TMP/racy.txt; then
        echo "the unordered atomicAdd dq passed"; return 1
    fi
    grep "FAIL   rerun dqkv bits differ" $FA2_TMP/racy.txt
}
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
# The SASS check; the performance model's mma.sync counts (dev/bench/gpu_model.py FA2_SASS) against
# that SASS, and two planted model errors (the dq pass with 2 tile matmuls; every block of the two
# passes given the same work, the heaviest-first order lost), each caught by test_gpu_model.py, the
# first by the SASS recount too;
# the SASS check's own plants, built for sm_80 only from a patched copy: 8 blocks per SM (64
# registers) must spill in the forward, and a local array in the head-size-128 dk/dv pass must fail
# it there (past the 32 bytes that pass may spill on sm_80).
fa2_sass() {
    local d=$FA2_TMP/model_mutant m
    bash dev/cuda/check_attention_fa2_sass.sh || return 1
    /usr/bin/python3 dev/bench/gpu_model.py --check-sass build/gpu/fa2_sass/attention_sm90.cubin \
        build/gpu/fa2_sass/ptxas_sm90.log > $FA2_TMP/model_sass.txt || { grep -v "^ok" $FA2_TMP/model_sass.txt; return 1; }
    echo "model counts against the SASS: $(grep -c "^ok" $FA2_TMP/model_sass.txt) agree"
    for m in 's/"loop": {"HMMA": 96,/"loop": {"HMMA": 64,/' 's/works = \[(nq - x) \* k\["loop"\]\["instr"\]/works = [(nq + 1) \/ 2 * k["loop"]["instr"]/'; do
        rm -rf $d && mkdir -p $d && sed "$m" dev/bench/gpu_model.py > $d/gpu_model.py || return 1
        cmp -s dev/bench/gpu_model.py $d/gpu_model.py && { echo "mutation not applied: $m"; return 1; }
        if GPU_MODEL_DIR=$d /usr/bin/python3 dev/bench/test_gpu_model.py > $d/out.txt; then echo "NOT caught: $m"; return 1; fi
        echo "caught: $m ($(grep -c '^FAIL' $d/out.txt) checks failed)"
        if [ "${m:0:8}" = 's/"loop"' ] && /usr/bin/python3 $d/gpu_model.py --check-sass build/gpu/fa2_sass/attention_sm90.cubin \
            > $d/sass.txt; then echo "the SASS recount missed it"; return 1; fi
    done
    fa2_mutant $FA2_TMP/spill_src llmc/attention_fa2.cuh 's/^#define FA2_MIN_BLOCKS 1 /#define FA2_MIN_BLOCKS 8 /' &&
        sed -i 's|^    bf16\* dbase = dqkv + (size_t)b \* T \* rs + h \* D;$|    if constexpr (D > 64) { volatile float spill[80]; spill[lane] = dk[0][0]; dk[0][0] = spill[lane + 1]; }\n&|' \
            $FA2_TMP/spill_src/llmc/attention_fa2_backward.cuh &&
        grep -q "volatile float spill" $FA2_TMP/spill_src/llmc/attention_fa2_backward.cuh || { echo "the spill plant did not apply"; return 1; }
    ! FA2_SASS_ARCHS=80 FA2_SASS_SRC=$FA2_TMP/spill_src bash dev/cuda/check_attention_fa2_sass.sh \
        > $FA2_TMP/spill.txt || { echo "the planted spills passed"; return 1; }
    [ "$(grep -c "FAIL: stack frame or spills" $FA2_TMP/spill.txt)" -eq 4 ] &&
        grep -A1 "sm_80 attention_backward_fa2_dkv_kernelILi128E" $FA2_TMP/spill.txt | grep "FAIL: stack frame or spills"
}
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    check_bg attention_fa2_sass fa2_sass
else
    echo "SKIP attention_fa2_sass: no nvcc on this machine"
fi
# The emulated checks after the SASS check (nvcc, about 30 s of one core), which starts first: the
# longest of this file, it runs beside them
# T 1024 (16 key tiles; forward only, NH 2) and T 77 at GPT-2 124M's C 768, NH 12 (forward and
# backward), plain build (a checked one takes 2 minutes); the reverse and random schedules on --fa2-sched's smaller set
# (T 130 and 17 at each head size; --fa2-quick's full set runs under the forward schedule above)
check_bg attention_fa2_T1024 build/gpu/attention_emu --fa2
check_bg attention_fa2_checked_banks fa2_checked_banks
check_bg attention_fa2_checked_reverse_random bash -c "EMU_SCHED=reverse build/gpu/attention_emu_check --fa2-sched &&
    EMU_SCHED=random:5 build/gpu/attention_emu_check --fa2-sched"
check_bg attention_fa2_planted_bugs fa2_plants
check_bg attention_fa2_trainer_hs128_hs32 fa2_trainer_hs
