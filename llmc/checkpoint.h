// Training-state checkpoints (our format, shared by both trainers). A checkpoint of step S in
// the log dir is: model_S.bin (the model file), state_S_RANK.bin for every rank (its optimizer
// shard and where training stands, with a CRC-32C of its header and of its payload inside), and
// DONE_S, the manifest, written last by rank 0 once every rank has finished: every file of the
// checkpoint with its size and (the model file) its CRC-32C, then a CRC-32C of the manifest
// itself. Every file goes to a temporary name, is fsync'ed and renamed, so a checkpoint is
// complete and verifiable the moment DONE_S exists, and a crash at any moment never leaves one
// that verifies but is incomplete. A checkpoint resumes on any world size, -ds, -z and -b with
// the same -t and -d (the optimizer shards are re-cut). With -ls (llmc/outer_sync.h) a state file
// also holds the rank's owned local parameters (the replicas differ between syncs) and its outer
// parameters and momentum; such a checkpoint resumes on its own layout at any step, and on
// another layout with the same dp_replicate only where the replicas agreed. With -lo exchanges in
// flight it also holds their held sums and local snapshots (the same layout only). See
// docs/checkpoints.md. The parts, one concern a file:
//   llmc/ckpt_state_file.h   the state file's format: header, arrays, CRCs, writing and reading one file
//   llmc/ckpt_layout.h       loading onto any layout (the old shards re-cut)
//   llmc/ckpt_outer_rules.h  the replica sync's rules of a resume
//   llmc/ckpt_manifest.h     the manifest, verifying a checkpoint, choosing the one to resume
//   llmc/ckpt_retention.h    the checkpoints of a dir: listing, setting aside, removing, -nk
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include "ckpt_state_file.h"
#include "ckpt_layout.h"
#include "ckpt_outer_rules.h"
#include "ckpt_manifest.h"
#include "ckpt_retention.h"

#endif
