// gpu_memory: the per-rank memory the CUDA trainer reports at start ("memory per rank: ..."),
// for shapes too large to start here: the same closed forms (llmc/accounting.h) and activation
// buffer sizes (train_gpt2.cu's activation table) the trainer prints, without allocating anything. Used for the
// numbers quoted in scripts/run_gpt2_*.sh; dev/test_multi_gpu.py checks it against the trainer.
// Beside our activation bytes it prints llm.c's for the same run with its cuDNN attention.
//   gpu_memory DESCRIPTOR VOCAB T_MAX B T WORLD DP_SHARD ZERO RECOMPUTE MASTER
#define TESTING
#include "../train_gpt2.cu"

// llm.c's activation bytes (karpathy/llm.c train_gpt2.cu, fill_in_activation_sizes, built with
// ENABLE_CUDNN: attention keeps an fp32 (L, B, NH, T) statistic), as a closed form. Per layer
// qkv 3C, atty, residual2, residual3 C each, fch 4C, ln1 and ln2 C each unless -r 2, fch_gelu 4C
// unless -r >= 1 (then one B T 4C slot); once: encoded, lnf, scratch_btc C each, scratch_bt4c 4C,
// output max(3C, NH T, Vp) (logits, dlogits, backward scratch); fp32: the LayerNorm means and rstds
// (2 per LayerNorm per row), losses, the attention statistic.
static size_t llmc_activation_bytes(const GPT2Config* c, size_t B, size_t T, int recompute, size_t X) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size, BT = B * T;
    size_t out_width = 3 * C;
    if (NH * T > out_width) { out_width = NH * T; }
    if (Vp > out_width) { out_width = Vp; }
    size_t per_layer = 3 * C + 3 * C + 4 * C + (recompute < 2 ? 2 * C : 0) + (recompute < 1 ? 4 * C : 0);
    size_t once = 3 * C + 4 * C + (recompute >= 1 ? 4 * C : 0) + out_width;
    size_t fp32 = L * 4 * BT + 2 * BT + BT + L * B * NH * T;
    return (L * per_layer + once) * BT * X + fp32 * sizeof(float);
}

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
                                            grad_layers_for_stage(zero, config.num_layers), 0);
    mem.activations = activation_buffers(NULL, act_shape(&config, B, T, recompute, 1), bufs);
    printf("%s %zu parameters, %s, B %d T %d, %d ranks (dp_shard %d), ZeRO %d, -r %d, master %s\n", argv[1], n,
           PRECISION_NAME, B, T, world, mesh.dp_shard, zero, recompute, master ? "fp32" : "none");
    printf("memory per rank: params %zu grads %zu optimizer %zu activations %zu bytes\n", mem.params, mem.grads,
           mem.optimizer, mem.activations);
    printf("total %.2f GiB per rank\n", (mem.params + mem.grads + mem.optimizer + mem.activations) / 1073741824.0);
    printf("activation buffers (train_gpt2.cu's table):\n");
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) {
        printf("  %-10s %14zu bytes %6.2f GiB%s\n", bufs[i].name, bufs[i].bytes, bufs[i].bytes / 1073741824.0,
               bufs[i].bytes == 0 ? " (inside logits)" : "");
    }
    size_t llmc = llmc_activation_bytes(&config, B, T, recompute, sizeof(floatX));
    printf("activations: ours %zu bytes (%.2f GiB), llm.c with cuDNN attention %zu bytes (%.2f GiB), ratio %.3f\n",
           mem.activations, mem.activations / 1073741824.0, llmc, llmc / 1073741824.0,
           (double)mem.activations / (double)llmc);
    shard_layout_free(&layout);
    return 0;
}
