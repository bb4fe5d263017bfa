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

--ranks N1,N2,...: what a run on N ranks would communicate. For each N, K groups of N val
micro-batches (one per rank, B x T tokens each) give N real gradients per unit; each mode reduces
them the way it does with N ranks on one step (llmc/geofp8.h geofp8_reduce_*_ranks: bf16 and
native fp8 with the rounding at every combine in rank order and the N-rank headroom scale,
twophase, and geofp8 on every fc1/fc2 unit with the low-rank-32 factor of the activations pooled
over the N micro-batches, exact eigenvectors, p 1 and auto), and the table gives the RelL2
against the fp32 average, mean ± std over the K groups, with its change against native fp8 on
the same group. A second table, once every N is done, gives each mode's slope onto the fp32
average (Σ ĝ·ḡ / Σ ḡ² over the units of a kind: 1 when the error is noise about the gradient,
below 1 when the sum shrinks it), with native and twophase in both formats (E4M3 and E5M2).

  make fidelity && ./build/fidelity -e out/tiny300/model_00000300.bin -b 8 -t 256 -k 8
  ./build/fidelity -e out/tiny300/model_00000300.bin -b 1 -t 256 -k 4 --ranks 2,8,32,64
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

// The --ranks table: for each N, K groups of N micro-batches; one row per N and unit kind, printed
// as soon as that N is done.
static void ranks_tables(LlamaModel* m, GradComm* gc, DataLoader* loader, const std::vector<int>& ranks_list, int K, int B, int T,
                         Fp8Format fmt) {
    const int BT = B * T;
    const int kinds[2] = {T_FC2W, T_FC1W};
    std::vector<int> geo_idx;  // gc->geo entries of the fc1 / fc2 units, and their offsets into a rank's copy
    std::vector<size_t> copy_off;
    size_t per_rank = 0;
    for (size_t i = 0; i < gc->geo.size(); i++) {
        const LlamaUnit& u = gc->units[gc->geo[i].unit];
        if (u.tensor != T_FC1W && u.tensor != T_FC2W) continue;
        geo_idx.push_back((int)i);
        copy_off.push_back(per_rank);
        per_rank += (size_t)u.rows * u.cols;
    }
    const int max_n = *std::max_element(ranks_list.begin(), ranks_list.end());
    const double gib = (double)max_n * per_rank * sizeof(float) / (1u << 30);
    if (gib > 16.0)
        user_error("--ranks: %d ranks of this model's fc1/fc2 gradients need %.1f GiB, more than 16 GiB; use fewer ranks", max_n, gib);
    static const char* MODES[] = {"bf16", "fp8 native", "fp8 twophase", "geofp8 r32 p 1", "geofp8 r32 p auto"};
    const int NMODE = 5, FP8 = 1, NSLOPE = 7;  // the slope table adds native and twophase in the other format
    const Fp8Format other = fmt == FP8_E4M3 ? FP8_E5M2 : FP8_E4M3;
    printf("### N-rank reduction (%s): RelL2 against the fp32 average over N ranks, mean ± std over %d groups of N micro-batches of "
           "B=%d T=%d (a group's figure: the mean over the units of a kind); in brackets the change against native fp8 on the same group\n\n",
           fp8_format_name(fmt), K, B, T);
    printf("| N | units |");
    for (int k = 0; k < NMODE; k++) printf(" %s |", MODES[k]);
    printf("\n|---|---|");
    for (int k = 0; k < NMODE; k++) printf("---|");
    printf("\n");
    fflush(stdout);
    GeoFP8LowrankSpec spec_p1, spec_auto;
    std::vector<std::pair<int, std::vector<std::vector<std::vector<double>>>>> slope_rows;  // (N, slope[kind][mode][group])
    long long step = 1000000;  // begin_step numbers, apart from the batches of the tables above
    for (int N : ranks_list) {
        // rel[kind][mode][group]
        std::vector<std::vector<std::vector<double>>> rel(2, std::vector<std::vector<double>>(NMODE));
        std::vector<std::vector<std::vector<double>>> slope(2, std::vector<std::vector<double>>(NSLOPE));  // [kind][mode][group]
        std::vector<std::vector<float>> copies(N, std::vector<float>(per_rank));
        for (int grp = 0; grp < K; grp++) {
            gradcomm_begin_step(gc, (int)step++, (long long)N * BT);  // A and E[δδᵀ] pooled over the N micro-batches
            for (int r = 0; r < N; r++) {
                dataloader_next_batch(loader);
                memset(m->grads, 0, m->num_params * sizeof(float));
                llama_forward(m, loader->inputs, B, T);
                llama_observe_inputs(m, gc, B, T);
                llama_backward(m, loader->inputs, loader->targets, B, T, 1.0f, gc);
                for (size_t j = 0; j < geo_idx.size(); j++) {
                    const LlamaUnit& u = gc->units[gc->geo[geo_idx[j]].unit];
                    memcpy(copies[r].data() + copy_off[j], m->grads + u.offset, (size_t)u.rows * u.cols * sizeof(float));
                }
            }
            std::vector<std::vector<double>> sum(2, std::vector<double>(NMODE, 0.0));
            std::vector<std::vector<double>> hg(2, std::vector<double>(NSLOPE, 0.0)), gg(2, std::vector<double>(NSLOPE, 0.0));
            int count[2] = {0, 0};
            for (size_t j = 0; j < geo_idx.size(); j++) {
                const GeoUnit& g = gc->geo[geo_idx[j]];
                const LlamaUnit& u = gc->units[g.unit];
                const int ki = u.tensor == T_FC2W ? 0 : 1;
                const size_t n = (size_t)g.d_out * g.d_in;
                std::vector<const float*> G(N);
                for (int r = 0; r < N; r++) G[r] = copies[r].data() + copy_off[j];
                std::vector<double> acc(n, 0.0);
                for (int r = 0; r < N; r++)
                    for (size_t i = 0; i < n; i++) acc[i] += G[r][i];
                std::vector<float> ref(n), out(n);
                for (size_t i = 0; i < n; i++) ref[i] = (float)(acc[i] / N);
                if (!geofp8_parse_lowrank("lowrank_A_32", g.d_in, &spec_p1) || !geofp8_parse_lowrank("lowrank_A_32_pauto", g.d_in, &spec_auto))
                    user_error("--ranks: unit %s has d_in %d < 32, too narrow for the low-rank-32 factor", u.name.c_str(), g.d_in);
                GeoFP8Eigen eig;  // one eigendecomposition of the pooled A for both factors
                const GeoFP8Eigen* ep = geofp8_eigen_exact(&eig, g.A[0].data(), g.d_in) == 0 ? &eig : NULL;
                GeoFP8Factor t1, ta;
                geofp8_spec_factor(&t1, spec_p1, g.A[0].data(), NULL, 0, g.d_in, G[0], g.d_out, 1, 0, ep);
                geofp8_spec_factor(&ta, spec_auto, g.A[0].data(), NULL, 0, g.d_in, G[0], g.d_out, 1, 0, ep);  // q from rank 0's own gradient
                for (int k = 0; k < NSLOPE; k++) {
                    bool ok = k == 0   ? geofp8_reduce_bf16_ranks(out.data(), G.data(), N, n)
                              : k == 1 ? geofp8_reduce_native_ranks(fmt, out.data(), G.data(), N, n)
                              : k == 2 ? geofp8_reduce_twophase_ranks(fmt, out.data(), G.data(), N, n)
                              : k == 5 ? geofp8_reduce_native_ranks(other, out.data(), G.data(), N, n)
                              : k == 6 ? geofp8_reduce_twophase_ranks(other, out.data(), G.data(), N, n)
                                       : geofp8_reduce_geo_ranks(fmt, out.data(), G.data(), N, g.d_out, g.d_in, k == 3 ? &t1 : &ta);
                    GeoFP8Fidelity f{NAN, NAN, NAN, NAN, NAN};
                    if (ok) geofp8_fidelity_metrics(&f, out.data(), ref.data(), n);
                    if (k < NMODE) sum[ki][k] += f.rel_l2;
                    // the slope of the kind's units together: Σ ĝ·ḡ and Σ ḡ² pooled over them
                    double a = 0.0, b = 0.0;
                    for (size_t i = 0; i < n; i++) a += (double)out[i] * ref[i], b += (double)ref[i] * ref[i];
                    hg[ki][k] += ok ? a : NAN;
                    gg[ki][k] += b;
                }
                count[ki]++;
            }
            for (int ki = 0; ki < 2; ki++) {
                for (int k = 0; k < NMODE; k++) rel[ki][k].push_back(sum[ki][k] / count[ki]);
                for (int k = 0; k < NSLOPE; k++) slope[ki][k].push_back(hg[ki][k] / gg[ki][k]);
            }
            fprintf(stderr, "--ranks %d: group %d/%d done\n", N, grp + 1, K);
        }
        for (int ki = 0; ki < 2; ki++) {
            printf("| %d | %s |", N, kinds[ki] == T_FC2W ? "fc2" : "fc1");
            for (int k = 0; k < NMODE; k++) {
                std::vector<double> ratio;
                for (int grp = 0; grp < K; grp++) ratio.push_back(100.0 * (rel[ki][k][grp] / rel[ki][FP8][grp] - 1.0));
                double rm, rs, qm, qs;
                mean_std(rel[ki][k], &rm, &rs);
                mean_std(ratio, &qm, &qs);
                if (k == FP8) printf(" %.4e ± %.1e |", rm, rs);
                else printf(" %.4e ± %.1e (%+.1f ± %.1f%%) |", rm, rs, qm, qs);
            }
            printf("\n");
        }
        slope_rows.push_back({N, slope});
        fflush(stdout);
    }
    // the shrinkage: the regression slope of each mode's average onto the exact one (1: the error
    // is noise about the gradient; below 1: the sum shrinks it), over the kind's units together
    const char* fa = fp8_format_name(fmt);
    const char* fb = fp8_format_name(other);
    printf("\n### N-rank reduction: slope of the communicated average onto the fp32 average (Σ ĝ·ḡ / Σ ḡ² over the units of a kind, "
           "in double), mean ± std over the %d groups; below 1: the sum shrinks the gradient\n\n", K);
    printf("| N | units | bf16 | %s native | %s twophase | geofp8 r32 p 1 (%s native) | geofp8 r32 p auto (%s native) | %s native | %s twophase |\n",
           fa, fa, fa, fa, fb, fb);
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& row : slope_rows)
        for (int ki = 0; ki < 2; ki++) {
            printf("| %d | %s |", row.first, kinds[ki] == T_FC2W ? "fc2" : "fc1");
            for (int k = 0; k < NSLOPE; k++) {
                double sm, ss;
                mean_std(row.second[ki][k], &sm, &ss);
                printf(" %.4f ± %.4f |", sm, ss);
            }
            printf("\n");
        }
    printf("\n");
}

// The trainers' flags this tool takes (llmc/train_config.h parses and range-checks them, in
// either spelling, as -b 8, --batch-size 8 or --batch-size=8); -k and --ranks are its own.
static const char* FIDELITY_TRAIN_FLAGS[] = {"--model", "--val-data", "--batch-size", "--seq-len", "--seed", "--fp8-format"};

// --help: the flags with their defaults (the trainers' flags from their table, -b's own default).
static void fidelity_usage(const char* prog, const TrainConfig* d) {
    printf("usage: %s [flags]   (the paper's Tables I and II from a checkpoint's gradients)\n", prog);
    for (const char* f : FIDELITY_TRAIN_FLAGS) {
        const TrainOpt* o = train_config_find(f);
        char names[64];
        snprintf(names, sizeof(names), "%s%s%s", o->short_name ? o->short_name : "", o->short_name ? ", " : "", o->long_name);
        std::string v = train_config_value(d, o);
        if (strstr(o->help, "(default")) printf("  %-28s %s\n", names, o->help);
        else printf("  %-28s %s (default: %s)\n", names, o->help, v.empty() ? "none" : v.c_str());
    }
    printf("  %-28s %s (default: 8)\n", "-k", "val batches (groups of batches with --ranks) the figures average over");
    printf("  %-28s %s (default: none)\n", "--ranks", "comma list of rank counts N: the N-rank communication table");
}

int main(int argc, char** argv) {
    TrainConfig tc;
    train_config_defaults(&tc);
    tc.B = 8;
    int K = 8;
    std::string ranks_arg;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { fidelity_usage(argv[0], &tc); return 0; }
    for (int i = 1; i < argc; i++) {
        std::string name, value;
        bool inline_value = train_config_split_flag(argv[i], &name, &value);
        const TrainOpt* o = train_config_find(name);
        bool ours = name == "-k" || name == "--ranks";  // -k is the trainers' --schedule: ours wins
        bool known = ours;
        for (const char* f : FIDELITY_TRAIN_FLAGS) known |= !ours && o != NULL && strcmp(o->long_name, f) == 0;
        if (!known)
            user_error("unknown flag '%s' (expected -e MODEL, -j VAL_GLOB, -b B, -t T, -k BATCHES, --seed S, --fp8-format F, --ranks N,...; --help lists them)",
                       argv[i]);
        if (!inline_value) value = train_config_flag_value(argc, argv, &i, name);
        if (name == "-k") K = (int)train_config_parse_int("-k", value.c_str(), 1, 100000);
        else if (name == "--ranks") ranks_arg = value;
        else train_config_set(&tc, o, name.c_str(), value.c_str());
    }
    const std::string model = tc.model;
    const int B = tc.B;
    const unsigned long long seed = tc.seed;
    LlamaConfig lc;
    bool from_file = !llama_preset(model.c_str(), &lc);
    int ck_step = 0;
    if (from_file) checkpoint_read_model_header(model.c_str(), "-e", &lc, &ck_step);
    const int T = tc.T > 0 ? tc.T : lc.T;
    if (T > lc.T) user_error("-t: expected a sequence length <= %d (the model's T), found %d", lc.T, T);
    const Fp8Format fmt = train_config_fp8_format(&tc);
    std::vector<int> ranks_list;
    if (!ranks_arg.empty()) {
        size_t pos = 0;
        while (pos <= ranks_arg.size()) {
            size_t end = ranks_arg.find(',', pos);
            std::string tok = ranks_arg.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            char* e = NULL;
            long v = strtol(tok.c_str(), &e, 10);
            if (tok.empty() || *e != '\0' || !isdigit((unsigned char)tok[0]) || v < 1 || v > 1024)
                user_error("--ranks: expected a comma list of rank counts in [1, 1024], found '%s'", ranks_arg.c_str());
            ranks_list.push_back((int)v);
            if (end == std::string::npos) break;
            pos = end + 1;
        }
    }

    DataLoader loader;
    dataloader_init(&loader, tc.val_data.c_str(), "-j", B, T, 0, 1, lc.V);
    LlamaModel m;
    llama_model_alloc(&m, &lc, B, T);
    if (from_file) checkpoint_read_model(model.c_str(), "-e", &lc, m.params);
    else llama_init_params(&lc, m.params, seed);

    // the kfac mode of the gradient communication collects E[hhᵀ] and E[δδᵀ] of every linear
    // unit, afresh for every batch (a refresh every step)
    tc.comm = "kfac";
    tc.fp8_format = "e4m3";  // the statistics do not depend on it; fmt goes to each round trip
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
            std::vector<GeoFP8Fidelity> sum(NR, GeoFP8Fidelity{0, 0, 0, 0, 0});
            int count = 0;
            for (const GeoUnit& g : gc.geo) {
                const LlamaUnit& u = gc.units[g.unit];
                if (u.tensor != kinds[ki]) continue;
                const float* G = m.grads + u.offset;
                const float* h = kinds[ki] == T_FC2W ? m.acts.sw + (size_t)u.layer * N * lc.FF : m.acts.ln2 + (size_t)u.layer * N * lc.C;
                // A's eigendecomposition once per unit and batch, for every exact low-rank and
                // symmetric row (13 of them; at d12's fc2, d_in 2048, each would take seconds)
                GeoFP8Eigen eig;
                const GeoFP8Eigen* ep = geofp8_eigen_exact(&eig, g.A[0].data(), g.d_in) == 0 ? &eig : NULL;
                for (int k = 0; k < NR; k++) {
                    GeoFP8Fidelity f;
                    const char* method = k < NM ? GEOFP8_FIDELITY_METHODS[k] : EXTRA[k - NM].method;
                    int exact = k < NM ? 0 : EXTRA[k - NM].exact;
                    if (geofp8_fidelity_method_stats(&f, method, G, g.d_out, g.d_in, g.A[0].data(), g.Gs[0].data(), h, N, exact,
                                                     seed + (uint64_t)g.unit, fmt, ep) != 0)
                        f = GeoFP8Fidelity{NAN, NAN, NAN, NAN, NAN};
                    sum[k].rel_l2 += f.rel_l2; sum[k].cos += f.cos; sum[k].max_err += f.max_err; sum[k].mse += f.mse;
                }
                count++;
            }
            units[ki] = count;
            for (int k = 0; k < NR; k++)
                per[ki][k].push_back(GeoFP8Fidelity{sum[k].rel_l2 / count, sum[k].cos / count, sum[k].max_err / count, sum[k].mse / count, NAN});
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
    if (!ranks_list.empty()) ranks_tables(&m, &gc, &loader, ranks_list, K, B, T, fmt);
    dataloader_free(&loader);
    llama_model_free(&m);
    return 0;
}
