// gpu_memory: the per-rank memory the CUDA trainer reports at start ("memory per rank: ..."),
// for shapes too large to start here: the same closed forms (llmc/accounting.h) and activation
// buffer sizes (train_gpt2.cu's activation table) the trainer prints, without allocating anything. Used for the
// numbers quoted in scripts/run_gpt2_*.sh; dev/test_multi_gpu.py checks it against the trainer.
//   gpu_memory DESCRIPTOR VOCAB T_MAX B T WORLD DP_SHARD ZERO RECOMPUTE MASTER
#define TESTING
#include "../train_gpt2.cu"

int main(int argc, char** argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: %s DESCRIPTOR VOCAB T_MAX B T WORLD DP_SHARD ZERO RECOMPUTE MASTER\n", argv[0]);
        return 2;
    }
    GPT2Config config;
    gpt2_config_from_descriptor(&config, argv[1], atoi(argv[2]), atoi(argv[3]));
    int B = atoi(argv[4]), T = atoi(argv[5]), world = atoi(argv[6]), zero = atoi(argv[8]);
    int recompute = atoi(argv[9]), master = atoi(argv[10]) && sizeof(floatX) != sizeof(float);
    Mesh mesh;
    mesh_init(&mesh, world, 0, atoi(argv[7]));
    ShardLayout layout;
    shard_layout_init(&layout, &config, mesh.dp_shard);
    size_t n = gpt2_num_parameters(&config);
    ActBuffer bufs[NUM_ACT_BUFFERS];
    MemoryBytes mem = memory_bytes_per_rank(&layout, zero, n, sizeof(floatX), sizeof(floatX), master,
                                            grad_layers_for_stage(zero, config.num_layers));
    mem.activations = activation_buffers(NULL, act_shape(&config, B, T, recompute, 1), bufs);
    printf("%s %zu parameters, %s, B %d T %d, %d ranks (dp_shard %d), ZeRO %d, -r %d, master %s\n", argv[1], n,
           PRECISION_NAME, B, T, world, mesh.dp_shard, zero, recompute, master ? "fp32" : "none");
    printf("memory per rank: params %zu grads %zu optimizer %zu activations %zu bytes\n", mem.params, mem.grads,
           mem.optimizer, mem.activations);
    printf("total %.2f GiB per rank\n", (mem.params + mem.grads + mem.optimizer + mem.activations) / 1073741824.0);
    printf("activation buffers (train_gpt2.cu's table):\n");
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) {
        printf("  %-10s %14zu bytes %6.2f GiB\n", bufs[i].name, bufs[i].bytes, bufs[i].bytes / 1073741824.0);
    }
    shard_layout_free(&layout);
    return 0;
}
