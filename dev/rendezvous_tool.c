// One rank of the start-up rendezvous of llmc/rendezvous.h, alone (no MPI, no NCCL), for
// dev/test_rendezvous.py: rank 0 makes a random 128-byte blob (as an NCCL id is) and hands it over,
// the others receive it; each prints it in hex and exits 0, or fails as the trainer would.
//   rendezvous_tool tcp RANK WORLD PORT JOB      (JOB: the -pj token; rank 0 listens, the others connect to 127.0.0.1)
//   rendezvous_tool fs RANK WORLD DIR JOB
// TRAIN_GPT2_TIMEOUT bounds every wait, as in the trainer.
#include <stdio.h>
#include "../llmc/utils.h"
#include "../llmc/rendezvous.h"

int main(int argc, char** argv) {
    if (argc != 6 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "fs"))) {
        fprintf(stderr, "usage: %s tcp|fs RANK WORLD PORT|DIR JOB\n", argv[0]);
        return 2;
    }
    const char* t = getenv("TRAIN_GPT2_TIMEOUT");
    Rendezvous r = {.rank = atoi(argv[2]), .world = atoi(argv[3]), .timeout_s = t ? atof(t) : 600.0};
    rendezvous_job(&r, argv[5], argc, argv);
    uint8_t blob[128];
    memset(blob, 0, sizeof(blob));
    for (int i = 0; r.rank == 0 && i < 16; i++) {
        uint64_t x = rdv_nonce();
        memcpy(blob + 8 * i, &x, 8);
    }
    if (strcmp(argv[1], "tcp") == 0) {
        rendezvous_tcp(&r, blob, sizeof(blob), "127.0.0.1", atoi(argv[4]), NULL);
    } else {
        rendezvous_fs(&r, blob, sizeof(blob), argv[4], NULL);
        if (r.rank == 0) { rendezvous_fs_cleanup(&r, argv[4]); }
    }
    printf("rank %d blob ", r.rank);
    for (int i = 0; i < (int)sizeof(blob); i++) { printf("%02x", blob[i]); }
    printf("\n");
    return 0;
}
