/*
fidelity.cpp — reproduces the paper's Tables I and II (one-step FP8 round-trip fidelity of
several communication coordinate systems) on this engine's own gradients, from any checkpoint.

For one batch of the val data it runs forward and backward in fp32, collects for every fc2 (and
fc1) unit its gradient G (d_out, d_in), its input statistics A = E[h hᵀ] and its output-gradient
statistics E[δ δᵀ], then for each method maps G into that method's coordinates, round-trips
through FP8 E4M3 with one power-of-two scale per tensor, maps back and compares with G
(geofp8_fidelity_method_stats in llmc/geofp8.h). Figures are averaged over the units of a kind
and printed as markdown tables next to the paper's numbers.

  make fidelity && ./build/fidelity -e out/tiny300/model_00000300.bin -b 8 -t 256
*/
#define TRAIN_LLAMA_NO_MAIN
#include "../train_llama_cpu.cpp"

// The paper's figures (Table I and II, 600M model, RelL2 and Cos), for side-by-side printing.
static const struct { const char* method; const char* label; double rel_l2, cos; } PAPER[] = {
    {"euclidean", "Euclidean baseline", 5.281973e-02, 9.986041e-01},
    {"output_side", "Output-side only", 5.282879e-02, 9.986036e-01},
    {"input_full", "Input-side full-A", 1.768108e-02, 9.998500e-01},
    {"kfac", "K-FAC (two-sided)", 1.770532e-02, 9.998502e-01},
    {"diag_A", "Input-side diag-A", 5.262250e-02, 9.986144e-01},
    {"block_A_32", "Input-side block-A-32", 3.168243e-02, 9.994993e-01},
    {"block_A_64", "Input-side block-A-64", 2.754295e-02, 9.996220e-01},
    {"block_A_128", "Input-side block-A-128", 2.431718e-02, 9.997058e-01},
    {"lowrank_A_8", "Input-side low-rank-A-8", 1.958074e-02, 9.998106e-01},
    {"lowrank_A_16", "Input-side low-rank-A-16", 1.731027e-02, 9.998523e-01},
    {"lowrank_A_32", "Input-side low-rank-A-32", 1.720702e-02, 9.998551e-01},
};

int main(int argc, char** argv) {
    std::string model = "tiny", val = TRAIN_DEFAULT_VAL_DATA;
    int B = 8, T = 0;
    unsigned long long seed = 1337;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) user_error("%s: expected a value after the flag", a.c_str());
        const char* v = argv[++i];
        if (a == "-e") model = v;
        else if (a == "-j") val = v;
        else if (a == "-b") B = atoi(v);
        else if (a == "-t") T = atoi(v);
        else if (a == "--seed") seed = strtoull(v, NULL, 10);
        else user_error("unknown flag '%s' (expected -e MODEL, -j VAL_GLOB, -b B, -t T, --seed S)", a.c_str());
    }
    LlamaConfig lc;
    bool from_file = !llama_preset(model.c_str(), &lc);
    int ck_step = 0;
    if (from_file) checkpoint_read_model_header(model.c_str(), "-e", &lc, &ck_step);
    if (T <= 0) T = lc.T;
    if (B <= 0 || T > lc.T) user_error("-b/-t: expected B >= 1 and T <= %d, found B=%d T=%d", lc.T, B, T);

    // one batch of val data
    DataLoader loader;
    dataloader_init(&loader, val.c_str(), "-j", B, T, 0, 1, lc.V);
    dataloader_next_batch(&loader);

    LlamaModel m;
    llama_model_alloc(&m, &lc, B, T);
    if (from_file) checkpoint_read_model(model.c_str(), "-e", &lc, m.params);
    else llama_init_params(&lc, m.params, seed);

    // the kfac mode of the gradient communication collects E[hhᵀ] and E[δδᵀ] of every linear unit
    TrainConfig tc;
    train_config_defaults(&tc);
    tc.comm = "kfac";
    tc.B = B; tc.T = T;
    CommGrid grid = {0, 1, MPI_COMM_WORLD};  // one rank: no MPI call is made
    GradComm gc;
    gradcomm_init(&gc, &tc, &lc, &grid);
    int N = B * T;
    gradcomm_begin_step(&gc, 0, N);
    memset(m.grads, 0, m.num_params * sizeof(float));
    llama_forward(&m, loader.inputs, B, T);
    llama_observe_inputs(&m, &gc, B, T);
    float loss = llama_backward(&m, loader.inputs, loader.targets, B, T, 1.0f, &gc);
    printf("model %s (%s), step %d; one val batch B=%d T=%d, loss %.4f\n\n", model.c_str(), llama_config_string(&lc).c_str(),
           ck_step, B, T, loss);

    const int NM = GEOFP8_FIDELITY_NUM_METHODS;
    for (int kind : {T_FC2W, T_FC1W}) {
        // per method: sums over the units of this kind, with low-rank rows from the sketch and exact
        std::vector<GeoFP8Fidelity> sum(NM + 3, GeoFP8Fidelity{0, 0, 0, 0});
        int units = 0;
        for (const GeoUnit& g : gc.geo) {
            const LlamaUnit& u = gc.units[g.unit];
            if (u.tensor != kind) continue;
            const float* G = m.grads + u.offset;
            const float* h = kind == T_FC2W ? m.acts.sw + (size_t)u.layer * N * lc.FF : m.acts.ln2 + (size_t)u.layer * N * lc.C;
            for (int k = 0; k < NM + 3; k++) {
                GeoFP8Fidelity f;
                const char* method = k < NM ? GEOFP8_FIDELITY_METHODS[k] : GEOFP8_FIDELITY_METHODS[NM - 3 + (k - NM)];
                int exact = k >= NM;
                if (geofp8_fidelity_method_stats(&f, method, G, g.d_out, g.d_in, g.A.data(), g.Gs.data(), h, N, exact,
                                                 seed + (uint64_t)g.unit) != 0)
                    f = GeoFP8Fidelity{NAN, NAN, NAN, NAN};
                sum[k].rel_l2 += f.rel_l2; sum[k].cos += f.cos; sum[k].max_err += f.max_err; sum[k].mse += f.mse;
            }
            units++;
        }
        printf("### %s units (%d layers), mean over layers\n\n", kind == T_FC2W ? "fc2" : "fc1", units);
        printf("| method | RelL2 | Cos | MaxErr | MSE | paper RelL2 | paper Cos |\n|---|---|---|---|---|---|---|\n");
        double base = sum[0].rel_l2 / units;
        for (int k = 0; k < NM + 3; k++) {
            double r = sum[k].rel_l2 / units;
            const char* label = k < NM ? PAPER[k].label : NULL;
            char exact_label[64];
            if (k >= NM) { snprintf(exact_label, sizeof(exact_label), "%s (exact eigenvectors)", PAPER[NM - 3 + (k - NM)].label); label = exact_label; }
            printf("| %s | %.6e | %.7f | %.6e | %.6e |", label, r, sum[k].cos / units, sum[k].max_err / units, sum[k].mse / units);
            if (k < NM) printf(" %.6e | %.7f |", PAPER[k].rel_l2, PAPER[k].cos); else printf(" | |");
            printf("\n");
            (void)base;
        }
        printf("\nRelL2 relative to Euclidean:");
        for (int k = 1; k < NM + 3; k++)
            printf(" %s %+.1f%%", k < NM ? GEOFP8_FIDELITY_METHODS[k] : (std::string(GEOFP8_FIDELITY_METHODS[NM - 3 + (k - NM)]) + "_exact").c_str(),
                   100.0 * (sum[k].rel_l2 / units / base - 1.0));
        printf("\n\n");
    }
    dataloader_free(&loader);
    llama_model_free(&m);
    return 0;
}
