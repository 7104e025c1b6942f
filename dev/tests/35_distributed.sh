# Data-parallel checks of the CPU trainer over MPI (sourced by dev/run_tests.sh): the mesh
# and data split, equivalence of 1/2/4 ranks and every ZeRO stage and mesh shape, memory and
# communication accounting, resume on 2 ranks, and failing ranks. See dev/test_distributed.py.
# Every good run lands in the goldens' ledger, compared bit for bit at the end (dev/test_golden.py).
/usr/bin/python3 dev/test_golden.py reset dist
check build_test_mesh gcc -O1 -I. -Wall -Wextra -Werror -Wno-unused-function -o build/test_mesh dev/test_mesh.c -lm
check mesh_and_data_split ./build/test_mesh
# each subcommand of dev/test_distributed.py, one check: equivalence (1/2/4 ranks, every stage and mesh),
# mesh84 (32 ranks), accounting (memory and bytes), resume (2 ranks, ZeRO 1), failures (refusals, a rank
# without data)
for sub in equivalence:dist_equivalence mesh84:dist_mesh_8x4 accounting:dist_accounting \
    resume:dist_resume_2_ranks_stage1 failures:dist_failures; do
    check ${sub#*:} /usr/bin/python3 dev/test_distributed.py ${sub%%:*}
done
# the runs above against dev/tests/golden/dist.txt: losses, records, model and state files bit for bit
check dist_golden /usr/bin/python3 dev/test_golden.py check dist
# the test of that test: a CPU trainer whose AdamW eps is 1e-4 larger (relative) passes the tolerances
# above but must differ from the golden
check dist_golden_catches_a_mutant /usr/bin/python3 dev/test_golden.py mutant
# -opt muon (dev/test_muon.py): one rank against train_gpt2.py's Muon within 1e-5 (and AdamW unmoved),
# 2 and 4 ranks and a 2 x 2 mesh with ZeRO 0 against one rank, resumes bit for bit and the other -opt
# refused, the refusals, Muon inside -ls replicas (MuLoCo) against train_gpt2.py, and two planted
# Muons (no lr ratio, no Nesterov) the reference check must catch; about 40 s on the 2-core host
for sub in reference ranks resume refusals muloco plant; do
    check muon_$sub /usr/bin/python3 dev/test_muon.py $sub
done
