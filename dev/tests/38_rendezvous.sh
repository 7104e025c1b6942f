# The -pi tcp / -pi fs start-up rendezvous of the GPU trainer (llmc/rendezvous.h; sourced by
# dev/run_tests.sh), driven by build/rendezvous_tool (one rank alone): only real ranks of this job
# get rank 0's id; port probes, garbage, silent connections, another job, another world size and a
# duplicate rank are dropped and logged; an earlier run's files in the -pf directory are never read
# (dev/test_rendezvous.py). Two mutants, applied to a copy, must fail it: rank 0 not comparing the
# job's identity, and not removing an earlier run's acknowledgements.
rendezvous_mutant() {
    local d=build/rendezvous/mutant_$1 pattern=$2
    rm -rf $d && mkdir -p $d/llmc $d/dev && cp llmc/rendezvous.h llmc/utils.h $d/llmc/ && cp dev/rendezvous_tool.c $d/dev/ || return 1
    sed -i "$pattern" $d/llmc/rendezvous.h
    cmp -s llmc/rendezvous.h $d/llmc/rendezvous.h && { echo "the mutation did not apply"; return 1; }
    cc -O1 -Wno-unused-function -o $d/tool $d/dev/rendezvous_tool.c || return 1
    if RDV_TOOL=$d/tool RDV_OUT=$d/run RDV_TIMEOUT=14 /usr/bin/python3 dev/test_rendezvous.py > $d/out.txt 2>&1; then
        cat $d/out.txt; echo "the mutant passed"; return 1
    fi
    echo "caught: $(grep -c '^FAIL' $d/out.txt) failing checks"; grep '^FAIL' $d/out.txt | cut -c1-160
}
check_bg rendezvous_mutant_any_job rendezvous_mutant job 's/} else if (h->job != me->job) {/} else if (0) {/'
check_bg rendezvous_mutant_stale_acks rendezvous_mutant acks 's/for (int r = 1; r < me->world; r++) { \/\/ and its acks/for (int r = 1; r < 1; r++) { \/\/ and its acks/'
# (the mutants mostly wait out their timeouts: the real tool's run goes beside them)
check rendezvous_strays bash -c "make -s build/rendezvous_tool && /usr/bin/python3 dev/test_rendezvous.py"
check_wait
