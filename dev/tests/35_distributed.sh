# Data-parallel checks of the CPU trainer over MPI (sourced by dev/run_tests.sh): the mesh
# and data split, equivalence of 1/2/4 ranks and every ZeRO stage and mesh shape, memory and
# communication accounting, resume on 2 ranks, and failing ranks. See dev/test_distributed.py.
check build_test_mesh gcc -O1 -I. -Wall -Wextra -Werror -Wno-unused-function -o build/test_mesh dev/test_mesh.c -lm
check mesh_and_data_split ./build/test_mesh
check dist_equivalence /usr/bin/python3 dev/test_distributed.py equivalence
check dist_accounting /usr/bin/python3 dev/test_distributed.py accounting
check dist_resume_2_ranks_stage1 /usr/bin/python3 dev/test_distributed.py resume
check dist_failures /usr/bin/python3 dev/test_distributed.py failures
