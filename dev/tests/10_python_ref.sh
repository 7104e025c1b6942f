# Checks for the PyTorch reference (train_gpt2.py) and the data scripts (dev/data).
# Sourced by dev/run_tests.sh; every check registers with `check NAME COMMAND...`.
PYREF_PY=/usr/bin/python3          # Debian's python with torch + numpy
PYREF_TMP=build/test_tmp/python_ref
mkdir -p "$PYREF_TMP"

# Independent reader: validates a shard (magic, version, size, tokens < vocab) and prints
# "ntok n_eot"; stdlib only so it shares no code with the writers.
pyref_shard_info() {
    python3 - "$1" "$2" <<'PY'
import struct, sys, array
path, vocab = sys.argv[1], int(sys.argv[2])
raw = open(path, "rb").read()
h = struct.unpack("<256i", raw[:1024])
assert h[0] == 20240520 and h[1] == 1, (path, h[:3])
assert len(raw) == 1024 + 2 * h[2], (path, len(raw), h[2])
t = array.array("H"); t.frombytes(raw[1024:])
if sys.byteorder == "big": t.byteswap()
assert max(t) < vocab, (path, max(t))
print(h[2], t.count(vocab - 1))
PY
}

pyref_kjv() {
    local out=$PYREF_TMP/kjv
    rm -rf "$out"
    dev/data/kjv.sh --out-dir "$out" || return 1
    local train val
    train=$(pyref_shard_info "$out/kjv_train.bin" 257) || return 1
    val=$(pyref_shard_info "$out/kjv_val.bin" 257) || return 1
    echo "train (ntok, docs): $train   val: $val"
    [ "${train#* }" = 63 ] && [ "${val#* }" = 3 ] || { echo "expected 63 train and 3 val books"; return 1; }
    local nt=${train% *} nv=${val% *}
    # the val split is about 5% of all tokens
    [ $((nv * 100 / (nt + nv))) -ge 4 ] && [ $((nv * 100 / (nt + nv))) -le 7 ] || { echo "val share off"; return 1; }
    python3 - "$out/kjv_tokenizer.bin" <<'PY' || return 1
import struct, sys
raw = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", raw[:1024])
assert h[:4] == (20240328, 2, 257, 256), h[:4]
pos, toks = 1024, []
while pos < len(raw):
    n = raw[pos]; assert 1 <= n <= 255; toks.append(raw[pos + 1:pos + 1 + n]); pos += 1 + n
assert pos == len(raw) and len(toks) == 257, (pos, len(raw), len(toks))
assert all(toks[i] == bytes([i]) for i in range(256)) and toks[256] == b"<|endoftext|>"
print("tokenizer ok")
PY
    # second run is a no-op that leaves the files alone
    local before after
    before=$(stat -c %Y "$out"/*.bin)
    dev/data/kjv.sh --out-dir "$out" | grep -q "up to date" || { echo "second run rebuilt"; return 1; }
    after=$(stat -c %Y "$out"/*.bin)
    [ "$before" = "$after" ]
}

pyref_compile() {
    local f
    for f in dev/data/*.py train_gpt2.py; do
        python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$f" || return 1
        $PYREF_PY -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$f" || return 1
    done
    # without tiktoken (or network) the download scripts must stop with a clear message
    if ! python3 -c 'import tiktoken' 2>/dev/null; then
        python3 dev/data/tinyshakespeare.py --out-dir "$PYREF_TMP/ts" 2>&1 | grep -q "needs tiktoken" || return 1
    fi
}

# expect_error FILE CMD...: CMD exits non-zero with exactly one stderr line that names FILE
pyref_expect_error() {
    local file=$1; shift
    if "$@" >/dev/null 2>"$PYREF_TMP/err"; then echo "accepted: $*"; return 1; fi
    cat "$PYREF_TMP/err"
    [ "$(wc -l <"$PYREF_TMP/err")" -eq 1 ] && grep -qF "$file" "$PYREF_TMP/err"
}

pyref_rejects() {
    local d=$PYREF_TMP/rej model="--model d1 --channels 16 --heads 2 --vocab 257 --max-seq 16"
    mkdir -p "$d"
    python3 dev/data/tiny_shard.py "$d/good.bin" --ntok 200 --vocab 257 --seed 5 || return 1
    # positive control: the good shard trains
    $PYREF_PY train_gpt2.py $model --data "$d/good.bin" --B 2 --T 8 --steps 1 --write-model "$d/m.bin" || return 1
    python3 dev/data/tiny_shard.py "$d/magic.bin" --ntok 200 --vocab 257 --bad-magic || return 1
    pyref_expect_error "$d/magic.bin" $PYREF_PY train_gpt2.py $model --data "$d/magic.bin" --B 2 --T 8 --steps 1 || return 1
    python3 dev/data/tiny_shard.py "$d/short.bin" --ntok 200 --vocab 257 --truncate || return 1
    pyref_expect_error "$d/short.bin" $PYREF_PY train_gpt2.py $model --data "$d/short.bin" --B 2 --T 8 --steps 1 || return 1
    python3 dev/data/tiny_shard.py "$d/big.bin" --ntok 200 --vocab 257 --token-too-big 17 || return 1
    pyref_expect_error "$d/big.bin" $PYREF_PY train_gpt2.py $model --data "$d/big.bin" --B 2 --T 8 --steps 1 || return 1
    grep -q "byte offset 1058" "$PYREF_TMP/err" || return 1
    head -c $(($(stat -c %s "$d/m.bin") - 4)) "$d/m.bin" >"$d/m_short.bin"
    pyref_expect_error "$d/m_short.bin" $PYREF_PY train_gpt2.py --load "$d/m_short.bin" || return 1
}

# A small run end to end: file sizes, loss near ln(257) at init and falling, determinism, and
# that loading the written fp32 model reproduces the losses exactly.
pyref_run() {
    local d=$PYREF_TMP/run args="--data data/kjv/kjv_val.bin --B 4 --T 32 --steps 10"
    mkdir -p "$d"
    dev/data/kjv.sh || return 1
    $PYREF_PY train_gpt2.py --model d2 --channels 64 --heads 4 --vocab 257 --max-seq 64 --seed 1 \
        --write-model "$d/m.bin" --write-model-bf16 "$d/m16.bin" --write-state "$d/s.bin" \
        --write-losses "$d/l1.txt" $args || return 1
    $PYREF_PY train_gpt2.py --load "$d/m.bin" --write-losses "$d/l2.txt" $args || return 1
    cmp "$d/l1.txt" "$d/l2.txt" || return 1
    $PYREF_PY - "$d" <<'PY'
import sys, os, math
d = sys.argv[1]
n = 384*64 + 64*64 + 2 * (4*64 + 3*64*64 + 3*64 + 64*64 + 64 + 4*64*64 + 4*64 + 4*64*64 + 64) + 2*64
assert os.path.getsize(f"{d}/m.bin") == 1024 + 4 * n
assert os.path.getsize(f"{d}/m16.bin") == 1024 + 2 * n
assert os.path.getsize(f"{d}/s.bin") == 1024 + 4 * (2*128 + 128*257 + 1 + n)
l = [float(v) for v in open(f"{d}/l1.txt")]
print(l)
assert len(l) == 10 and abs(l[0] - math.log(257)) < 0.1 and l[-1] < l[0] - 0.05
import numpy as np                       # the state holds batch 0 and the step-0 loss
s = open(f"{d}/s.bin", "rb").read()
h = np.frombuffer(s[:16], "<i4"); assert list(h) == [20240327, 2, 4, 32], h
x = np.frombuffer(s[1024:1024 + 512], "<i4"); y = np.frombuffer(s[1536:2048], "<i4")
toks = np.fromfile("data/kjv/kjv_val.bin", "<u2", offset=1024)[:129]
assert (x == toks[:128]).all() and (y == toks[1:]).all()
loss = np.frombuffer(s, "<f4", 1, 2048 + 4 * 128 * 257)[0]
assert abs(loss - l[0]) < 1e-6, (loss, l[0])
PY
}

check pyref_selftest $PYREF_PY train_gpt2.py --selftest
# --drop k@s / --rejoin k@s (elastic replicas): alone == one replica, a loop written in the test,
# planted bugs caught, refusals (dev/test_ref_drop.py; about 5 s)
check pyref_drop_rejoin $PYREF_PY dev/test_ref_drop.py
check pyref_kjv_data pyref_kjv
check pyref_scripts_compile pyref_compile
check pyref_rejects_bad_files pyref_rejects
check pyref_small_run pyref_run
