# The CPU trainer built without Open MPI (-DNO_MPI, llmc/mpi_single.h), as `make` builds it where
# mpicc is missing: it links no MPI library, trains exactly like the MPI build on one rank (the
# same main.log, byte for byte), and refuses to start as one of several ranks.
SINGLE=build/cpu/train_gpt2cpu_single
SINGLE_RUN="-e d2 -V 257 -sl 64 -b 4 -t 32 -x 6 -v 3 -m 2 -s 0 -l 1e-3 -c 0.1"

check single_build make -s $SINGLE train_gpt2cpu data/kjv/kjv_train.bin
check single_links_no_mpi bash -c "ldd $SINGLE && ! ldd $SINGLE | grep -i mpi"

single_same_losses() {
    rm -rf build/single_mpi build/single_nompi
    ./train_gpt2cpu $SINGLE_RUN -o build/single_mpi >/dev/null || return 1
    $SINGLE $SINGLE_RUN -o build/single_nompi >/dev/null || return 1
    cat build/single_nompi/main.log
    cmp build/single_mpi/main.log build/single_nompi/main.log
}
check single_same_losses_as_mpi_build single_same_losses

# one error line naming the variable, non-zero exit, nothing trained
single_refuses_ranks() {
    OMPI_COMM_WORLD_SIZE=2 $SINGLE $SINGLE_RUN >build/single_ranks.out 2>build/single_ranks.err && return 1
    cat build/single_ranks.err
    [ "$(wc -l < build/single_ranks.err)" -eq 1 ] && grep -q "^error: OMPI_COMM_WORLD_SIZE=2 .*without MPI" build/single_ranks.err &&
        ! grep -q "^step" build/single_ranks.out
}
check single_refuses_several_ranks single_refuses_ranks
