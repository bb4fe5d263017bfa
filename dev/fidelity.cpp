/*
fidelity.cpp — reproduces the paper's Tables I and II (one-step FP8 round-trip fidelity of
several communication coordinate systems) on this engine's own gradients, from any checkpoint.

For each of K batches of the val data (-k, 8 by default) it runs forward and backward in fp32,
collects for every fc2 (and fc1) unit its gradient G (d_out, d_in), its input statistics
A = E[h hᵀ] and its output-gradient statistics E[δ δᵀ], then for each method maps G into that
method's coordinates, round-trips through FP8 (E4M3, or E5M2 with --fp8-format e5m2) with one
power-of-two scale per tensor, maps
back and compares with G (geofp8_fidelity_method_stats in llmc/geofp8.h). A batch's figure is the
mean over the units of a kind; the tables give the mean ± std of it over the K batches, and of its
ratio to the same batch's Euclidean figure, next to the paper's numbers. Besides the paper's
methods: the exact-eigenvector low-rank rows, the full symmetric transform (A + εI)^(-p/2) for
powers 0.25 … 1.5 and auto (--geofp8-power) and for larger dampings (--geofp8-damping), and the
deployed low-rank path after 4 refreshes (subspace iteration, what a run converges to) next to
the one-pass sketch.

  make fidelity && ./build/fidelity -e out/tiny300/model_00000300.bin -b 8 -t 256 -k 8
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

// The rows after the paper's: geofp8_fidelity_method_stats names (llmc/geofp8.h) and labels.
static const struct { const char* method; int exact; const char* label; } EXTRA[] = {
    {"lowrank_A_8", 1, "low-rank-A-8, exact eigenvectors"},
    {"lowrank_A_16", 1, "low-rank-A-16, exact eigenvectors"},
    {"lowrank_A_32", 1, "low-rank-A-32, exact eigenvectors"},
    {"lowrank_A_32_it4", 0, "low-rank-A-32, 4 refreshes (deployed)"},
    {"lowrank_A_32_p0.5_it4", 0, "low-rank-A-32, 4 refreshes, p 0.5"},
    {"lowrank_A_32_pauto_it4", 0, "low-rank-A-32, 4 refreshes, p auto"},
    {"sym_A_p0.25", 1, "symmetric (A+eps)^(-p/2), p 0.25"},
    {"sym_A_p0.5", 1, "symmetric, p 0.5"},
    {"sym_A_p0.75", 1, "symmetric, p 0.75"},
    {"sym_A_p1", 1, "symmetric, p 1"},
    {"sym_A_p1.25", 1, "symmetric, p 1.25"},
    {"sym_A_p1.5", 1, "symmetric, p 1.5"},
    {"sym_A_pauto", 1, "symmetric, p auto (q/2)"},
    {"sym_A_p1_d1e-2", 1, "symmetric, p 1, damping 1e-2"},
    {"sym_A_p1_d1e-1", 1, "symmetric, p 1, damping 1e-1"},
    {"sym_A_p0.5_d1e-1", 1, "symmetric, p 0.5, damping 1e-1"},
};

static void mean_std(const std::vector<double>& v, double* mean, double* std) {
    double s = 0.0, ss = 0.0;
    for (double x : v) s += x;
    *mean = v.empty() ? NAN : s / (double)v.size();
    for (double x : v) ss += (x - *mean) * (x - *mean);
    *std = v.size() > 1 ? sqrt(ss / (double)(v.size() - 1)) : 0.0;
}

int main(int argc, char** argv) {
    std::string model = "tiny", val = TRAIN_DEFAULT_VAL_DATA;
    int B = 8, T = 0, K = 8;
    unsigned long long seed = 1337;
    std::string format = "e4m3";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) user_error("%s: expected a value after the flag", a.c_str());
        const char* v = argv[++i];
        if (a == "-e") model = v;
        else if (a == "-j") val = v;
        else if (a == "-b") B = atoi(v);
        else if (a == "-t") T = atoi(v);
        else if (a == "-k") K = atoi(v);
        else if (a == "--seed") seed = strtoull(v, NULL, 10);
        else if (a == "--fp8-format") format = v;
        else user_error("unknown flag '%s' (expected -e MODEL, -j VAL_GLOB, -b B, -t T, -k BATCHES, --seed S, --fp8-format F)", a.c_str());
    }
    LlamaConfig lc;
    bool from_file = !llama_preset(model.c_str(), &lc);
    int ck_step = 0;
    if (from_file) checkpoint_read_model_header(model.c_str(), "-e", &lc, &ck_step);
    if (T <= 0) T = lc.T;
    if (B <= 0 || T > lc.T) user_error("-b/-t: expected B >= 1 and T <= %d, found B=%d T=%d", lc.T, B, T);
    if (K < 1 || K > 100000) user_error("-k: expected a number of batches in [1, 100000], found %d", K);
    if (format != "e4m3" && format != "e5m2") user_error("--fp8-format: expected e4m3 or e5m2, found '%s'", format.c_str());
    const Fp8Format fmt = format == "e5m2" ? FP8_E5M2 : FP8_E4M3;

    DataLoader loader;
    dataloader_init(&loader, val.c_str(), "-j", B, T, 0, 1, lc.V);
    LlamaModel m;
    llama_model_alloc(&m, &lc, B, T);
    if (from_file) checkpoint_read_model(model.c_str(), "-e", &lc, m.params);
    else llama_init_params(&lc, m.params, seed);

    // the kfac mode of the gradient communication collects E[hhᵀ] and E[δδᵀ] of every linear
    // unit, afresh for every batch (a refresh every step)
    TrainConfig tc;
    train_config_defaults(&tc);
    tc.comm = "kfac";
    tc.B = B; tc.T = T;
    tc.geofp8_refresh = 1;
    CommGrid grid = {0, 1, MPI_COMM_WORLD};  // one rank: no MPI call is made
    GradComm gc;
    gradcomm_init(&gc, &tc, &lc, &grid);
    const int N = B * T, NM = GEOFP8_FIDELITY_NUM_METHODS, NX = (int)(sizeof(EXTRA) / sizeof(EXTRA[0])), NR = NM + NX;
    const int kinds[2] = {T_FC2W, T_FC1W};
    // per kind, method, batch: the mean over units of RelL2, Cos, MaxErr, MSE
    std::vector<std::vector<std::vector<GeoFP8Fidelity>>> per(2, std::vector<std::vector<GeoFP8Fidelity>>(NR));
    int units[2] = {0, 0};
    double loss_sum = 0.0;
    for (int b = 0; b < K; b++) {
        dataloader_next_batch(&loader);
        gradcomm_begin_step(&gc, b, N);
        memset(m.grads, 0, m.num_params * sizeof(float));
        llama_forward(&m, loader.inputs, B, T);
        llama_observe_inputs(&m, &gc, B, T);
        loss_sum += llama_backward(&m, loader.inputs, loader.targets, B, T, 1.0f, &gc);
        for (int ki = 0; ki < 2; ki++) {
            std::vector<GeoFP8Fidelity> sum(NR, GeoFP8Fidelity{0, 0, 0, 0});
            int count = 0;
            for (const GeoUnit& g : gc.geo) {
                const LlamaUnit& u = gc.units[g.unit];
                if (u.tensor != kinds[ki]) continue;
                const float* G = m.grads + u.offset;
                const float* h = kinds[ki] == T_FC2W ? m.acts.sw + (size_t)u.layer * N * lc.FF : m.acts.ln2 + (size_t)u.layer * N * lc.C;
                for (int k = 0; k < NR; k++) {
                    GeoFP8Fidelity f;
                    const char* method = k < NM ? GEOFP8_FIDELITY_METHODS[k] : EXTRA[k - NM].method;
                    int exact = k < NM ? 0 : EXTRA[k - NM].exact;
                    if (geofp8_fidelity_method_stats(&f, method, G, g.d_out, g.d_in, g.A.data(), g.Gs.data(), h, N, exact,
                                                     seed + (uint64_t)g.unit, fmt) != 0)
                        f = GeoFP8Fidelity{NAN, NAN, NAN, NAN};
                    sum[k].rel_l2 += f.rel_l2; sum[k].cos += f.cos; sum[k].max_err += f.max_err; sum[k].mse += f.mse;
                }
                count++;
            }
            units[ki] = count;
            for (int k = 0; k < NR; k++)
                per[ki][k].push_back(GeoFP8Fidelity{sum[k].rel_l2 / count, sum[k].cos / count, sum[k].max_err / count, sum[k].mse / count});
        }
        fprintf(stderr, "batch %d/%d done\n", b + 1, K);
    }
    printf("model %s (%s), step %d; %d val batches of B=%d T=%d, mean loss %.4f; FP8 format %s\n\n", model.c_str(),
           llama_config_string(&lc).c_str(), ck_step, K, B, T, loss_sum / K, fp8_format_name(fmt));

    for (int ki = 0; ki < 2; ki++) {
        printf("### %s units (%d layers): mean ± std over %d batches of the mean over layers\n\n", kinds[ki] == T_FC2W ? "fc2" : "fc1",
               units[ki], K);
        printf("| method | RelL2 | vs Euclidean | Cos | MaxErr | MSE | paper RelL2 | paper Cos |\n|---|---|---|---|---|---|---|---|\n");
        for (int k = 0; k < NR; k++) {
            std::vector<double> rel, ratio, cs, mx, ms;
            for (int b = 0; b < K; b++) {
                const GeoFP8Fidelity& f = per[ki][k][b];
                rel.push_back(f.rel_l2);
                ratio.push_back(100.0 * (f.rel_l2 / per[ki][0][b].rel_l2 - 1.0));
                cs.push_back(f.cos); mx.push_back(f.max_err); ms.push_back(f.mse);
            }
            double rm, rs, qm, qs, cm, csd, mm, msd, sm, ssd;
            mean_std(rel, &rm, &rs); mean_std(ratio, &qm, &qs); mean_std(cs, &cm, &csd); mean_std(mx, &mm, &msd); mean_std(ms, &sm, &ssd);
            printf("| %s | %.4e ± %.1e | %+.1f ± %.1f%% | %.7f | %.4e | %.4e |", k < NM ? PAPER[k].label : EXTRA[k - NM].label, rm, rs,
                   qm, qs, cm, mm, sm);
            if (k < NM) printf(" %.6e | %.7f |\n", PAPER[k].rel_l2, PAPER[k].cos);
            else printf(" | |\n");
        }
        printf("\n");
    }
    dataloader_free(&loader);
    llama_model_free(&m);
    return 0;
}
