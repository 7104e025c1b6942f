# -ls (DiLoCo, replicas synchronized every H steps) in the CPU trainer (sourced by dev/run_tests.sh):
# against the PyTorch reference on 2 x 1, 2 x 2 and 4 x 1 meshes and every ZeRO stage, data
# invariance across -ds, the runs that must equal synchronous training, the bytes and the memory
# line against closed forms, resumes inside a window, and the refusals. See dev/test_diloco.py.
# Every good run lands in the goldens' ledger, compared bit for bit at the end (dev/test_golden.py).
/usr/bin/python3 dev/test_golden.py reset diloco
check diloco_vs_pytorch /usr/bin/python3 dev/test_diloco.py reference
# -lf (streaming fragments) on 2 x 2: against train_gpt2.py --fragments (fp32, int8), -lf 1 bit for
# bit plain -ls, bytes per fragment against the closed form, resumes with fragments at different
# phases, -lo 1 against --overlap 1, -lo checkpoints and SIGUSR1 with exchanges in flight resumed
# bit for bit, the -lo memory line's closed form, planted bugs caught (a late offset in the
# reference, a rank issuing fragments in reverse order, blocking and on the -lo thread), refusals;
# 60-90 s on the shared 2-core host; it runs beside the checks below (its own directories, frag_*
# and lo_one_*; the d2 model is written by the first check).
check_bg diloco_fragments /usr/bin/python3 dev/test_diloco.py fragments
check diloco_data_invariance /usr/bin/python3 dev/test_diloco.py invariance
check diloco_identities /usr/bin/python3 dev/test_diloco.py identity
check diloco_accounting /usr/bin/python3 dev/test_diloco.py accounting
check diloco_resume /usr/bin/python3 dev/test_diloco.py resume
check diloco_refusals /usr/bin/python3 dev/test_diloco.py refusals
# -rq/-ref/-rqs/-rk (a compressed replica link with error feedback, -ls H and -ls 0):
# llmc/wire_format.h bit for bit against train_gpt2.py's, the CPU trainer on 2 x 2 against it, the
# bytes against the closed form, resumes with residuals, refusals, and mutants the checks must
# catch; about 2 minutes on the 2-core host. See dev/test_wire_format.py.
check wire_formats_vs_reference /usr/bin/python3 dev/test_wire_format.py formats
check wire_diloco_vs_pytorch /usr/bin/python3 dev/test_wire_format.py reference
check wire_resume_and_refusals /usr/bin/python3 dev/test_wire_format.py resume
check wire_mutants_caught /usr/bin/python3 dev/test_wire_format.py mutants
# -lo's goal, by the trainer's link-wait counter: with the link (-rb) at half a step per exchange,
# -lo 1 waits at most a tenth of what blocking -lo 0 is held (at least 0.75 of the link time); 6-15 s.
check diloco_overlap_link /usr/bin/python3 dev/test_diloco.py overlap
# the replica sync's guards: a NaN or an infinity in one replica's pseudo-gradients skips that sync on
# every replica (one all-reduced flag; the residuals and the outer state kept, -sk counts skipped syncs,
# -lo decides at the start), and between syncs a replica's own non-finite gradient skips its update
# alone, which its line says (dev/test_diloco.py guards; about 10 s)
check diloco_guards /usr/bin/python3 dev/test_diloco.py guards
# the runs above against dev/tests/golden/diloco.txt: losses, records, model and state files bit for bit
check_wait
check diloco_golden /usr/bin/python3 dev/test_golden.py check diloco
# the same bits on every host: seven golden runs of dist and diloco made again by CPU trainers built
# for x86-64-v3 and, on a host with AVX-512, x86-64-v4 (dev/test_golden.py targets; 15-40 s), and
# the test of that test, a copy whose layernorm mean sums in lanes of the vector width, which must differ
check_bg cpu_targets_golden /usr/bin/python3 dev/test_golden.py targets
check_bg cpu_targets_catch_a_plant /usr/bin/python3 dev/test_golden.py targets --plant
