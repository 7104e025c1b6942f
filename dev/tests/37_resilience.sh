# Resilience checks of the CPU trainer (sourced by dev/run_tests.sh): verified checkpoints
# (CRC-32C, corrupt files named and skipped), crash safety under kill -9, the checkpoint
# lifecycle (-y 1 into an empty dir, last step, larger -x, -nk), preemption by SIGUSR1/SIGTERM,
# skipped non-finite and spiking steps, resume on another world size / -ds / -z / -b, ckpt_tool,
# a killed or hung rank ending the job, checkpoints that cannot be written (a full disk: injected
# on 1 and 2 ranks, and a real small tmpfs where mount works) never costing the run.
# See dev/test_resilience.py and docs/checkpoints.md.
check resilience_build make -s train_gpt2cpu ckpt_tool
check resilience_checkpoint_lifecycle /usr/bin/python3 dev/test_resilience.py lifecycle
check resilience_corrupt_files_caught /usr/bin/python3 dev/test_resilience.py corrupt
check resilience_kill9_ten_times /usr/bin/python3 dev/test_resilience.py kill9
check resilience_preempt_signals /usr/bin/python3 dev/test_resilience.py preempt
check resilience_nonfinite_and_spike_steps /usr/bin/python3 dev/test_resilience.py nonfinite
check resilience_resume_on_other_layouts bash -c "make -s ckpt_tool && /usr/bin/python3 dev/test_resilience.py layout"
check resilience_failed_rank_stops_job /usr/bin/python3 dev/test_resilience.py failed_rank
check resilience_disk_full_checkpoints bash -c "make -s ckpt_tool && /usr/bin/python3 dev/test_resilience.py diskfull"
# The state header's slot table (llmc/ckpt_state_file.h) is what docs/checkpoints.md shows, and
# `ckpt_tool slots` refuses a table whose rows overlap (planted: the optimizer's row on slot 42).
check resilience_state_slot_table bash -c "make -s ckpt_tool && diff <(./ckpt_tool slots) \
    <(sed -n '/<!-- generated: ckpt_tool slots -->/,/<!-- end of generated table -->/p' docs/checkpoints.md | sed '1d;\$d') &&
    mkdir -p build && gcc -O1 -I. -DSTATE_PLANT_OVERLAP -o build/ckpt_tool_plant_overlap dev/ckpt_tool.c -lm &&
    ! build/ckpt_tool_plant_overlap slots > /dev/null 2>&1"
