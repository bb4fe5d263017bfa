/*
dump_logits.cpp — train_llama_cpu's own forward on real tokens, written to a file, so that another
implementation of the same model (an exported Hugging Face folder, scripts/export_hf.py) can be
compared with it: the logits of one sequence, and a greedy continuation (the sampler at
temperature 0: the most likely token each step, over the V real tokens).

  make build/dump_logits
  ./build/dump_logits -e out/run/model_00000300.bin -j 'data/kjv/kjv_val_*.bin' -t 64 -g 16 -o logits.bin

Output (little-endian): int32 T, int32 V, float32 logits (T, V) of the first T tokens of the
first shard; int32 P (the prompt: its first 8 tokens), int32 prompt (P); int32 G, int32 greedy (G).
*/
#define TRAIN_LLAMA_NO_MAIN
#include "../train_llama_cpu.cpp"

// The index of the largest of logits[0:V] (the first on ties).
static int dump_argmax(const float* logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

int main(int argc, char** argv) {
    std::string model, data = TRAIN_DEFAULT_VAL_DATA, out;
    int T = 64, G = 16;
    const int P = 8;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            printf("usage: %s -e MODEL -o OUT [-j SHARDS] [-t T] [-g G]\n"
                   "  -e   model checkpoint (model_*.bin) (default: none, required)\n"
                   "  -o   output file (default: none, required)\n"
                   "  -j   val shards whose first sequence is read (default: %s)\n"
                   "  -t   tokens of the sequence whose logits are written (default: 64)\n"
                   "  -g   greedy tokens generated after the first %d (default: 16)\n", argv[0], TRAIN_DEFAULT_VAL_DATA, P);
            return 0;
        }
        if (i + 1 >= argc) user_error("%s: expected a value after the flag", a.c_str());
        const char* v = argv[++i];
        if (a == "-e") model = v;
        else if (a == "-j") data = v;
        else if (a == "-o") out = v;
        else if (a == "-t") T = (int)train_config_parse_int("-t", v, 1, 1 << 20);
        else if (a == "-g") G = (int)train_config_parse_int("-g", v, 1, 1 << 20);
        else user_error("unknown flag '%s' (expected -e MODEL -j SHARDS -t T -g G -o OUT; --help lists them)", a.c_str());
    }
    if (model.empty() || out.empty()) user_error("-e and -o: expected a model checkpoint and an output file");
    LlamaConfig lc;
    checkpoint_read_model_header(model.c_str(), "-e", &lc, NULL);
    if (T < P || T > lc.T) user_error("-t: expected %d..%d, found %d", P, lc.T, T);
    if (G < 1 || P + G > lc.T) user_error("-g: expected 1..%d, found %d", lc.T - P, G);

    DataLoader loader;
    dataloader_init(&loader, data.c_str(), "-j", 1, T, 0, 1, lc.V);
    dataloader_next_batch(&loader);
    LlamaModel m;
    llama_model_alloc(&m, &lc, 1, std::max(T, P + G));
    checkpoint_read_model(model.c_str(), "-e", &lc, m.params);

    FILE* f = fopen_check(out.c_str(), "wb");
    int32_t dims[2] = {T, lc.V};
    fwrite_check(dims, 4, 2, f);
    llama_forward(&m, loader.inputs, 1, T);
    for (int t = 0; t < T; t++) fwrite_check(m.acts.logits + (size_t)t * lc.Vp, 4, (size_t)lc.V, f);

    std::vector<int> seq(loader.inputs, loader.inputs + P);
    for (int k = 0; k < G; k++) {
        int len = (int)seq.size();
        llama_forward(&m, seq.data(), 1, len);
        seq.push_back(dump_argmax(m.acts.logits + (size_t)(len - 1) * lc.Vp, lc.V));
    }
    int32_t n = P;
    fwrite_check(&n, 4, 1, f);
    for (int t = 0; t < P; t++) { int32_t x = seq[t]; fwrite_check(&x, 4, 1, f); }
    n = G;
    fwrite_check(&n, 4, 1, f);
    for (int t = 0; t < G; t++) { int32_t x = seq[P + t]; fwrite_check(&x, 4, 1, f); }
    fclose_check(f);
    printf("dump_logits: %s: logits (%d, %d) and %d greedy tokens -> %s\n", model.c_str(), T, lc.V, G, out.c_str());
    llama_model_free(&m);
    dataloader_free(&loader);
    return 0;
}
