// The selective scan, forward and backward, as plain loops over contiguous CPU arrays (primacy_mamba.compiled).
//
//     h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,    y_t = h_t C_t,    h_{-1} = 0
//
// Each call handles the batch elements [first, last); elements are independent, so callers split the batch across
// threads. Scratch arrays come from the caller (the backward keeps one element's states, (T + 1, E, N), to read
// h_{t-1} while it walks back in time); nothing is allocated here. The D u_t term is added by the caller.
//
// Scratch: h (2 E N + N) in forward (h_{t-1} and h_t, (E, N) each, then one channel's decays); in backward see
// there.
//
// Layout, row-major and contiguous: u, dt, y, gy, gu, gdt (B, T, E); b, c, gb, gc (B, T, N); a (E, N);
// ga_parts (B, E, N), one partial sum of ∂L/∂A per batch element, summed by the caller in a fixed order, so the
// result does not depend on how the batch was split.
//
// The loops over the state index n carry no dependence and contain no branch, so compilers vectorise them
// (with -fno-trapping-math for the clamps); sums over n run in a fixed order in a loop of their own.

#include <cmath>
#include <cstdint>
#include <cstring>

// On x86-64 Linux each entry point is built twice, for AVX2 and for the baseline, and the loader picks the one this
// CPU runs: one library serves every node of a cluster. Neither fuses a multiply and an add (-ffp-contract=off, and
// AVX2 has no FMA), so both round alike.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define PRIMACY_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PRIMACY_CLONES
#endif
// Everything below an entry point is inlined into it, so that each of its builds compiles all of its loops.
#if defined(__GNUC__) || defined(__clang__)
#define PRIMACY_INLINE inline __attribute__((always_inline))
#else
#define PRIMACY_INLINE inline
#endif

namespace {

// exp(x) in float, vectorisable: 2^k p(r) with k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts), p the
// degree-6 Taylor polynomial. Relative error ≤ 3e-7 (2.5 float ulp) on [-87, 88]; x is clamped there, so
// exp(x < -87) gives e^-87 ≈ 1.6e-38 rather than a subnormal.
PRIMACY_INLINE float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
    const float r = x - k * 0.693145751953125f - k * 1.428606765330187045e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// float64 is for verification against the other scans: the library's exp, exact to rounding.
PRIMACY_INLINE double fast_exp(double x) { return std::exp(x); }

// The mixer's elementwise maps around the scan (mixer_forward, mixer_backward), as torch computes them: softplus(x) =
// log(1 + e^x), x itself above 20 (torch's threshold), its derivative e^x / (e^x + 1) (1 above 20), σ(x) for SiLU.
// float32: from fast_exp, and log(1 + w) for w = e^-|x| ∈ (0, 1] as 2 atanh(s), s = w / (2 + w) ≤ 1/3, by its
// series to s^13 (truncation below 3e-8 relative); float64: the C library's, so that it equals torch to rounding.
PRIMACY_INLINE float softplus(float x) {
    const float w = fast_exp(x < 0.0f ? x : -x);
    const float s = w / (2.0f + w), s2 = s * s;
    float p = 1.0f / 13;
    p = p * s2 + 1.0f / 11;
    p = p * s2 + 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    p = p * s2 + 1.0f;
    const float soft = (x > 0.0f ? x : 0.0f) + 2.0f * s * p;
    return x > 20.0f ? x : soft;
}
PRIMACY_INLINE double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
PRIMACY_INLINE float softplus_grad(float x) {
    const float e = fast_exp(x);
    return x > 20.0f ? 1.0f : e / (e + 1.0f);
}
PRIMACY_INLINE double softplus_grad(double x) {
    const double e = std::exp(x);
    return x > 20.0 ? 1.0 : e / (e + 1.0);
}
PRIMACY_INLINE float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
PRIMACY_INLINE double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Σ_n x_n y_n in a fixed order, in four interleaved partial sums (which compilers keep in one vector register).
template <typename R>
PRIMACY_INLINE R dot(int64_t N, const R* __restrict__ x, const R* __restrict__ y) {
    R lanes[4] = {0, 0, 0, 0};
    int64_t n = 0;
    for (; n + 4 <= N; n += 4)
        for (int j = 0; j < 4; ++j) lanes[j] += x[n + j] * y[n + j];
    R total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; n < N; ++n) total += x[n] * y[n];
    return total;
}

// One channel at one position, over its N states: decay = exp(Δ_t A_e), h_t = decay ⊙ h_{t-1} + (Δ_t u_t) B_t.
template <typename R>
PRIMACY_INLINE void channel_step(int64_t N, R step, R injected, const R* __restrict__ ae, const R* __restrict__ bt,
                         const R* __restrict__ before, R* __restrict__ now, R* __restrict__ decay) {
    for (int64_t n = 0; n < N; ++n) {
        decay[n] = fast_exp(step * ae[n]);
        now[n] = decay[n] * before[n] + injected * bt[n];
    }
}

template <typename R>
PRIMACY_INLINE void forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dt,
                            const R* a, const R* b, const R* c, R* y, R* h) {
    for (int64_t i = first; i < last; ++i) {
        const R* ui = u + i * T * E;
        const R* dti = dt + i * T * E;
        const R* bi = b + i * T * N;
        const R* ci = c + i * T * N;
        R* yi = y + i * T * E;
        std::memset(h, 0, sizeof(R) * E * N);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {
            const R* before = h + (t % 2) * E * N;  // h_{t-1} and h_t take turns in the first two blocks of h
            R* now = h + (1 - t % 2) * E * N;
            for (int64_t e = 0; e < E; ++e) {
                const R step = dti[t * E + e];
                channel_step(N, step, step * ui[t * E + e], a + e * N, bi + t * N, before + e * N, now + e * N,
                             h + 2 * E * N);
                yi[t * E + e] = dot(N, now + e * N, ci + t * N);
            }
        }
    }
}

// One channel e at one position t, over its N states: G_t = gy_t C_t + carry (into g), ∂L/∂(Δ_t A) =
// G_t ⊙ h_{t-1} ⊙ exp(Δ_t A) (into g_log); adds to ∂L/∂C_t, ∂L/∂B_t and the batch element's ∂L/∂A, and sets carry
// for t - 1.
template <typename R>
PRIMACY_INLINE void channel_backward(int64_t N, R step, R injected, R out, const R* __restrict__ decay,
                                     const R* __restrict__ before, const R* __restrict__ now,
                                     const R* __restrict__ ct, R* __restrict__ carry, R* __restrict__ ga,
                                     R* __restrict__ gb, R* __restrict__ gc, R* __restrict__ g,
                                     R* __restrict__ g_log) {
    for (int64_t n = 0; n < N; ++n) {
        const R grad = out * ct[n] + carry[n];
        const R through_decay = grad * before[n] * decay[n];
        g[n] = grad;
        g_log[n] = through_decay;
        gc[n] += out * now[n];
        gb[n] += grad * injected;
        ga[n] += through_decay * step;
        carry[n] = decay[n] * grad;
    }
}

// Writes gu, gdt (B, T, E), gb, gc (B, T, N) and ga_parts (B, E, N) for [first, last). Scratch: states
// (T + 1, E, N) holds h_{-1} = 0, h_0, ..., h_{T-1}, decays (T, E, N) exp(Δ_t A); carry (E, N) holds
// exp(Δ_{t+1} A) ⊙ G_{t+1}, the part of G_t = ∂L/∂h_t that comes from later positions; g and g_log (N) one
// channel's G_t and ∂L/∂(Δ_t A).
template <typename R>
PRIMACY_INLINE void backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dt,
                             const R* a, const R* b, const R* c, const R* gy, R* gu, R* gdt, R* gb, R* gc,
                             R* ga_parts, R* states, R* carry, R* decays, R* __restrict__ g,
                             R* __restrict__ g_log) {
    for (int64_t i = first; i < last; ++i) {
        const R* ui = u + i * T * E;
        const R* dti = dt + i * T * E;
        const R* bi = b + i * T * N;
        const R* ci = c + i * T * N;
        const R* gyi = gy + i * T * E;
        R *gui = gu + i * T * E, *gdti = gdt + i * T * E, *gbi = gb + i * T * N, *gci = gc + i * T * N;
        R* gai = ga_parts + i * E * N;
        std::memset(states, 0, sizeof(R) * E * N);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {  // the states h_t of every t, as forward computes them
            const R* before = states + t * E * N;
            R* now = states + (t + 1) * E * N;
            for (int64_t e = 0; e < E; ++e) {
                const R step = dti[t * E + e];
                channel_step(N, step, step * ui[t * E + e], a + e * N, bi + t * N, before + e * N, now + e * N,
                             decays + (t * E + e) * N);
            }
        }
        std::memset(carry, 0, sizeof(R) * E * N);
        std::memset(gai, 0, sizeof(R) * E * N);
        std::memset(gbi, 0, sizeof(R) * T * N);
        std::memset(gci, 0, sizeof(R) * T * N);
        for (int64_t t = T - 1; t >= 0; --t) {
            const R* before = states + t * E * N;  // h_{t-1}, then h_t
            for (int64_t e = 0; e < E; ++e) {
                const int64_t at = t * E + e;
                const R step = dti[at], value = ui[at];
                const R* ae = a + e * N;
                channel_backward(N, step, step * value, gyi[at], decays + at * N, before + e * N, before + (E + e) * N,
                                 ci + t * N, carry + e * N, gai + e * N, gbi + t * N, gci + t * N, g, g_log);
                const R inject = dot(N, g, bi + t * N);  // ∂L/∂(Δ_t u_t)
                gui[at] = inject * step;
                gdti[at] = inject * value + dot(N, g_log, ae);  // ... + Σ_n ∂L/∂(Δ_t A_n) A_n
            }
        }
    }
}

// One position's rows of E channels, in loops of their own so that compilers vectorise them: Δ = softplus(x + bias)
// (forward), and the gate silu(z), its derivative and softplus's (backward; any of them may be null).
template <typename R>
PRIMACY_INLINE void step_row(int64_t E, const R* __restrict__ x, const R* __restrict__ bias, R* __restrict__ steps) {
    for (int64_t e = 0; e < E; ++e) steps[e] = softplus(x[e] + bias[e]);
}
template <typename R>
PRIMACY_INLINE void gate_row(int64_t E, const R* __restrict__ z, R* __restrict__ gates) {
    for (int64_t e = 0; e < E; ++e) gates[e] = z[e] * sigmoid(z[e]);
}
template <typename R>
PRIMACY_INLINE void gradient_rows(int64_t E, const R* __restrict__ x, const R* __restrict__ bias,
                                  const R* __restrict__ z, R* __restrict__ gates, R* __restrict__ gate_grads,
                                  R* __restrict__ step_grads) {
    for (int64_t e = 0; e < E; ++e) {
        const R sig = sigmoid(z[e]);
        gates[e] = z[e] * sig;
        gate_grads[e] = sig * (1 + z[e] * (1 - sig));  // torch's silu backward
        step_grads[e] = softplus_grad(x[e] + bias[e]);
    }
}

template <typename R>
PRIMACY_INLINE void forward_rows(int64_t E, const R* __restrict__ steps, const R* __restrict__ ut,
                                 const R* __restrict__ d, R* __restrict__ sums, R* __restrict__ injected,
                                 R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        sums[e] += steps[e];
        injected[e] = steps[e] * ut[e];
        y[e] = d[e] * ut[e];
    }
}

// The scan with the mixer's elementwise work folded in (primacy_mamba.compiled_mixer), as mamba_ssm's CUDA kernel
// does it: from x = dtr + bias (Δ before its bias and softplus), u, z (B, T, E), b, c (B, T, N), A given transposed,
// at (N, E), bias and d (E,),
//
//     Δ_t = softplus(x_t),   h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,   out_t = (h_t C_t + D ⊙ u_t) ⊙ silu(z_t)
//
// and dt_sums (B, E), each batch element's Σ_t Δ_t (the mixer reports Δ's mean). Unlike forward above, the state is
// kept (N, E), channels innermost: every loop runs over the E channels of one state index (long, contiguous,
// vectorised), and sums over n are accumulated per channel, in order, with no reduction across vector lanes.
// Scratch: h (N E + 4 E).
template <typename R>
PRIMACY_INLINE void mixer_forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u,
                                  const R* dtr, const R* bias, const R* at, const R* b, const R* c, const R* d,
                                  const R* z, R* out, R* dt_sums, R* scratch) {
    R* __restrict__ h = scratch;
    R* __restrict__ steps = h + N * E;
    R* __restrict__ gates = steps + E;
    R* __restrict__ injected = gates + E;
    R* __restrict__ y = injected + E;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * T * E;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R* outi = out + i * T * E;
        R* __restrict__ sums = dt_sums + i * E;
        std::memset(h, 0, sizeof(R) * N * E);  // h_{-1}
        std::memset(sums, 0, sizeof(R) * E);
        for (int64_t t = 0; t < T; ++t) {
            const R* __restrict__ ut = ui + t * E;
            step_row(E, xi + t * E, bias, steps);
            gate_row(E, zi + t * E, gates);
            forward_rows(E, steps, ut, d, sums, injected, y);
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n], cn = ci[t * N + n];
                const R* __restrict__ an = at + n * E;
                R* __restrict__ hn = h + n * E;
                for (int64_t e = 0; e < E; ++e) {
                    hn[e] = fast_exp(steps[e] * an[e]) * hn[e] + injected[e] * bn;
                    y[e] += hn[e] * cn;
                }
            }
            R* __restrict__ outt = outi + t * E;
            for (int64_t e = 0; e < E; ++e) outt[e] = y[e] * gates[e];
        }
    }
}

// mixer_backward's loops over the E channels of one position, as functions of their own: compilers vectorise them
// once their arrays are known not to overlap (__restrict__ parameters).
template <typename R>
PRIMACY_INLINE void start_rows(int64_t E, const R* __restrict__ d, const R* __restrict__ ut, const R* __restrict__ st,
                               const R* __restrict__ got, const R* __restrict__ gates, R* __restrict__ y,
                               R* __restrict__ injected, R* __restrict__ gy, R* __restrict__ inject,
                               R* __restrict__ glog) {
    for (int64_t e = 0; e < E; ++e) {
        y[e] = d[e] * ut[e];
        injected[e] = st[e] * ut[e];
        gy[e] = got[e] * gates[e];
        inject[e] = 0;
        glog[e] = 0;
    }
}

// State index n at one position: G = gy C_n + carry (into grad), ∂L/∂(Δ A_n) = G h_{t-1} exp(Δ A_n); adds to the
// element's ∂L/∂A_n, to Σ_n ∂L/∂(Δ A_n) A_n (glog) and to ∂L/∂(Δ u) (inject), and sets carry for t - 1.
template <typename R>
PRIMACY_INLINE void state_backward(int64_t E, R bn, R cn, const R* __restrict__ an, const R* __restrict__ hb,
                                   const R* __restrict__ st, const R* __restrict__ gy,
                                   R* __restrict__ cr, R* __restrict__ gan, R* __restrict__ glog,
                                   R* __restrict__ inject, R* __restrict__ grad) {
    for (int64_t e = 0; e < E; ++e) {
        const R decay = fast_exp(st[e] * an[e]);  // recomputed: cheaper than a (T, N, E) array read back
        const R g = gy[e] * cn + cr[e];
        const R through_decay = g * hb[e] * decay;
        grad[e] = g;
        gan[e] += through_decay * st[e];
        glog[e] += through_decay * an[e];
        inject[e] += g * bn;
        cr[e] = decay * g;
    }
}

template <typename R>
PRIMACY_INLINE void input_gradients(int64_t E, const R* __restrict__ st, const R* __restrict__ ut,
                                    const R* __restrict__ d, const R* __restrict__ gy, const R* __restrict__ inject,
                                    const R* __restrict__ glog, const R* __restrict__ step_grads, R* __restrict__ gut,
                                    R* __restrict__ gxt, R* __restrict__ gbiasi, R* __restrict__ gdi) {
    for (int64_t e = 0; e < E; ++e) {
        gut[e] = inject[e] * st[e] + gy[e] * d[e];
        const R gx = (inject[e] * ut[e] + glog[e]) * step_grads[e];
        gxt[e] = gx;
        gbiasi[e] += gx;
        gdi[e] += gy[e] * ut[e];
    }
}

// mixer_forward's gradients for [first, last): gu, gdtr, gz (B, T, E), gb, gc (B, T, N), and per batch element the
// partial sums of ∂L/∂A (transposed, (B, N, E)), ∂L/∂bias and ∂L/∂D ((B, E) each), summed by the caller in batch
// order. Scratch ((T + 2) N E + T E + 9 E): every h_t of one element ((T + 1) N E; exp(Δ_t A) is computed again, not
// kept), the carry exp(Δ_{t+1} A) ⊙ G_{t+1} (N E), every Δ_t (T E), and rows of one position.
template <typename R>
PRIMACY_INLINE void mixer_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u,
                                   const R* dtr, const R* bias, const R* at, const R* b, const R* c, const R* d,
                                   const R* z, const R* gout, R* gu, R* gdtr, R* gb, R* gc, R* gz, R* ga_parts,
                                   R* gbias_parts, R* gd_parts, R* scratch) {
    R* __restrict__ states = scratch;  // h_{-1} = 0, h_0, ..., h_{T-1}, (N, E) each
    R* __restrict__ carry = states + (T + 1) * N * E;
    R* __restrict__ steps = carry + N * E;
    R* __restrict__ gates = steps + T * E;
    R* __restrict__ gate_grads = gates + E;
    R* __restrict__ step_grads = gate_grads + E;
    R* __restrict__ injected = step_grads + E;
    R* __restrict__ gy = injected + E;  // ∂L/∂y_t before the gate
    R* __restrict__ inject = gy + E;  // ∂L/∂(Δ_t u_t)
    R* __restrict__ glog = inject + E;  // Σ_n ∂L/∂(Δ_t A_n) A_n
    R* __restrict__ grad = glog + E;  // G_t of one state index: ∂L/∂h_t
    R* __restrict__ y = grad + E;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * T * E, *gi = gout + i * T * E;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R *gbi = gb + i * T * N, *gci = gc + i * T * N;
        R* __restrict__ gai = ga_parts + i * N * E;
        R* __restrict__ gbiasi = gbias_parts + i * E;
        R* __restrict__ gdi = gd_parts + i * E;
        std::memset(states, 0, sizeof(R) * N * E);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {  // Δ_t and h_t of every t, as mixer_forward computes them
            const R* __restrict__ ut = ui + t * E;
            R* __restrict__ st = steps + t * E;
            step_row(E, xi + t * E, bias, st);
            for (int64_t e = 0; e < E; ++e) injected[e] = st[e] * ut[e];
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n];
                const R* __restrict__ an = at + n * E;
                const R* __restrict__ hb = states + (t * N + n) * E;
                R* __restrict__ hn = states + ((t + 1) * N + n) * E;
                for (int64_t e = 0; e < E; ++e) hn[e] = fast_exp(st[e] * an[e]) * hb[e] + injected[e] * bn;
            }
        }
        std::memset(carry, 0, sizeof(R) * N * E);
        std::memset(gai, 0, sizeof(R) * N * E);
        std::memset(gbiasi, 0, sizeof(R) * E);
        std::memset(gdi, 0, sizeof(R) * E);
        for (int64_t t = T - 1; t >= 0; --t) {
            const R* __restrict__ ut = ui + t * E;
            const R* __restrict__ st = steps + t * E;
            const R* __restrict__ got = gi + t * E;
            gradient_rows(E, xi + t * E, bias, zi + t * E, gates, gate_grads, step_grads);
            start_rows(E, d, ut, st, got, gates, y, injected, gy, inject, glog);
            for (int64_t n = 0; n < N; ++n) {  // y_t before the gate, as forward sums it
                const R cn = ci[t * N + n];
                const R* __restrict__ hn = states + ((t + 1) * N + n) * E;
                for (int64_t e = 0; e < E; ++e) y[e] += hn[e] * cn;
            }
            R* __restrict__ gzt = gz + (i * T + t) * E;
            for (int64_t e = 0; e < E; ++e) gzt[e] = got[e] * y[e] * gate_grads[e];
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n], cn = ci[t * N + n];
                const R* __restrict__ an = at + n * E;
                const R* __restrict__ hb = states + (t * N + n) * E;  // h_{t-1}
                const R* __restrict__ hn = states + ((t + 1) * N + n) * E;  // h_t
                R* __restrict__ cr = carry + n * E;
                R* __restrict__ gan = gai + n * E;
                state_backward(E, bn, cn, an, hb, st, gy, cr, gan, glog, inject, grad);
                gci[t * N + n] = dot(E, gy, hn);
                gbi[t * N + n] = dot(E, grad, injected);
            }
            R* __restrict__ gut = gu + (i * T + t) * E;
            R* __restrict__ gxt = gdtr + (i * T + t) * E;
            input_gradients(E, st, ut, d, gy, inject, glog, step_grads, gut, gxt, gbiasi, gdi);
        }
    }
}

}  // namespace

extern "C" {

int primacy_scan_abi() { return 3; }

PRIMACY_CLONES void primacy_scan_forward_f32(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                             const float* u, const float* dt, const float* a, const float* b,
                                             const float* c, float* y, float* h) {
    forward(first, last, T, E, N, u, dt, a, b, c, y, h);
}

PRIMACY_CLONES void primacy_scan_forward_f64(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                             const double* u, const double* dt, const double* a, const double* b,
                                             const double* c, double* y, double* h) {
    forward(first, last, T, E, N, u, dt, a, b, c, y, h);
}

PRIMACY_CLONES void primacy_scan_backward_f32(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                              const float* u, const float* dt, const float* a, const float* b,
                                              const float* c, const float* gy, float* gu, float* gdt, float* gb,
                                              float* gc, float* ga_parts, float* states, float* carry,
                                              float* decays, float* g, float* g_log) {
    backward(first, last, T, E, N, u, dt, a, b, c, gy, gu, gdt, gb, gc, ga_parts, states, carry, decays, g, g_log);
}

PRIMACY_CLONES void primacy_scan_backward_f64(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                              const double* u, const double* dt, const double* a, const double* b,
                                              const double* c, const double* gy, double* gu, double* gdt,
                                              double* gb, double* gc, double* ga_parts, double* states,
                                              double* carry, double* decays, double* g, double* g_log) {
    backward(first, last, T, E, N, u, dt, a, b, c, gy, gu, gdt, gb, gc, ga_parts, states, carry, decays, g, g_log);
}

#define PRIMACY_MIXER_ENTRIES(R, SUFFIX)                                                                              \
    PRIMACY_CLONES void primacy_mixer_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, \
                                                       const R* u, const R* dtr, const R* bias, const R* at,         \
                                                       const R* b, const R* c, const R* d, const R* z, R* out,       \
                                                       R* dt_sums, R* scratch) {                                     \
        mixer_forward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, out, dt_sums, scratch);                   \
    }                                                                                                                 \
    PRIMACY_CLONES void primacy_mixer_backward_##SUFFIX(                                                              \
        int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dtr, const R* bias,       \
        const R* at, const R* b, const R* c, const R* d, const R* z, const R* gout, R* gu, R* gdtr, R* gb, R* gc,     \
        R* gz, R* ga_parts, R* gbias_parts, R* gd_parts, R* scratch) {                                               \
        mixer_backward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, gout, gu, gdtr, gb, gc, gz, ga_parts,     \
                       gbias_parts, gd_parts, scratch);                                                              \
    }

PRIMACY_MIXER_ENTRIES(float, f32)
PRIMACY_MIXER_ENTRIES(double, f64)

}  // extern "C"
