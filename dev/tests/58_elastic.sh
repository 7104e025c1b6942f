# Elastic replicas (-le 1, issue 36) on the emulated GPU trainer (sourced by dev/run_tests.sh), ranks
# started without mpirun as separate processes (-pi tcp, RANK / WORLD_SIZE), which the emulated
# NCCL's own transport lets die and join: a replica killed or hung at a stated step and the
# survivors' losses and weights against train_gpt2.py --drop (and the time from the kill to rank 0's
# line), a replica killed in an outer sync (before its flag, inside the exchange) and the
# survivors redoing it, lost while an -lo exchange is in flight (redone) and a rejoin with -lo,
# the same through -pi fs files, a killed replica started again with -y 1 rejoining against --rejoin
# (also with -lf 2; a rejoining rank killed once admitted is given up), -lss, checkpoints written
# without the lost replica and resumed by all (it is rebuilt from the outer state), the lost
# replica's other rank, replica 0 lost, -lm, a stray connection; the refusals; a survivor averaging
# over R instead of R', a rebuilt replica keeping replica 0's moments, and a trainer that never polls
# a nonblocking communicator's ncclInProgress (the emulator reports it), must fail. The elastic
# path also runs built with emucc --check (random:3 here, reverse in the slower suite), a residual
# restored on an unordered stream caught by it. The runs partly wait (-wt 3), so they run side by
# side, the longest first. See dev/test_elastic.py.
check elastic_build bash -c "make -s -j2 -f dev/gpu.mk build/gpu/train_gpt2emu_fp32 build/gpu/train_gpt2emu_fp32_check &&
    make -s train_gpt2cpu ckpt_tool"
check elastic_refusals /usr/bin/python3 dev/test_elastic.py refusals
check_bg elastic_mutants_stream_poll /usr/bin/python3 dev/test_elastic.py mutant_b
check_bg elastic_resume /usr/bin/python3 dev/test_elastic.py resume
check_bg elastic_mutants_mean_rebuild /usr/bin/python3 dev/test_elastic.py mutant_a
check_bg elastic_checked_random /usr/bin/python3 dev/test_elastic.py checked
check_bg elastic_drop_2x2_rank0_lm /usr/bin/python3 dev/test_elastic.py drop_b
check_bg elastic_rejoin /usr/bin/python3 dev/test_elastic.py rejoin
check_bg elastic_overlap /usr/bin/python3 dev/test_elastic.py overlap
check_bg elastic_drop_2x1_4x1int8_3x1 /usr/bin/python3 dev/test_elastic.py drop_a
check_bg elastic_muon_drop_rejoin /usr/bin/python3 dev/test_elastic.py muon
check_bg elastic_lost_in_sync /usr/bin/python3 dev/test_elastic.py sync
check_bg elastic_pi_fs /usr/bin/python3 dev/test_elastic.py fs
check_wait
