#!/usr/bin/env bash
# check_attention_fa2_sass.sh: nvcc compiles dev/cuda/attention.cu (BF16, with llmc/attention_fa2.cuh)
# for sm_80 and sm_90 with -Werror; per arch, ptxas -v of attention_forward_fa2_kernel must show no
# spill and no stack frame (its registers and shared memory are printed); the sm_90 SASS (nvdisasm)
# of that kernel must hold HMMA.16816.F32.BF16, LDSM.16.M88.4 (Q, K), LDSM.16.MT88.4 (V) and
# LDGSTS (cp.async), and no local loads/stores (LDL/STL). Exit 1 naming what is missing.
# FA2_SASS_EXTRA: more nvcc flags (the test plants -DFA2_MIN_BLOCKS=8, whose spills must fail it).
set -u
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
nd=$(/usr/bin/python3 dev/gpu_kernels/sass_report.py --find-nvdisasm) || { echo "no nvdisasm"; exit 1; }
out=build/gpu/fa2_sass
mkdir -p $out
flags="-O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wno-unused-function,-Wno-format-truncation -Xptxas -v ${FA2_SASS_EXTRA:-}"
ok=1
for arch in 80 90; do
    $nvcc $flags -arch=sm_$arch -cubin -o $out/attention_sm$arch.cubin dev/cuda/attention.cu 2> $out/ptxas_sm$arch.log ||
        { cat $out/ptxas_sm$arch.log; exit 1; }
    # the kernel's two ptxas lines after its "Compiling entry function" line
    info=$(grep -A3 "Compiling entry function '_Z28attention_forward_fa2_kernel" $out/ptxas_sm$arch.log | tail -n 2)
    echo "sm_$arch attention_forward_fa2_kernel: $(echo "$info" | tr '\n' ' ' | sed 's/ptxas info *: //g')"
    echo "$info" | grep -q "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" ||
        { echo "  FAIL: stack frame or spills"; ok=0; }
done
$nd -c $out/attention_sm90.cubin > $out/attention_sm90.sass || exit 1
awk '/\.section[ \t]+\.text\./ { on = index($0, "attention_forward_fa2_kernel") > 0 } on' $out/attention_sm90.sass \
    > $out/fa2_sm90.sass
count() { grep -cE "$1" $out/fa2_sm90.sass; }
for pat in 'HMMA\.16816\.F32\.BF16' 'LDSM\.16\.M88\.4' 'LDSM\.16\.MT88\.4' 'LDGSTS'; do
    n=$(count "$pat")
    echo "sm_90 SASS: $n instructions match $pat"
    [ "$n" -gt 0 ] || { echo "  FAIL: none"; ok=0; }
done
n=$(count '\b(LDL|STL)\b')
echo "sm_90 SASS: $n local loads/stores"
[ "$n" -eq 0 ] || { echo "  FAIL: local memory used"; ok=0; }
[ $ok -eq 1 ]
