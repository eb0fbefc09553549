// The mLSTM cell over a sequence, forward and backward, as plain loops over contiguous CPU arrays
// (primacy_xlstm.mlstm_compiled, which states the map and its gradient).
//
// Each call handles the sequences [first, last) of the B·NH (batch element, head) pairs; they are independent, so
// callers split them across threads, and each one's arithmetic is the same whatever the split. Per sequence the
// kernel keeps the stabilised state S (d × dv) and n (d) and steps through the positions, from m = -inf:
//
//   m_t = max(m_{t-1} + log σ(f̃_t), ĩ_t)   (m_0 = ĩ_0),   α_t = exp(m_{t-1} + log σ(f̃_t) - m_t),   β_t = exp(ĩ_t - m_t)
//   S_t = α_t S_{t-1} + β_t k̂_t v_tᵀ,   n_t = α_t n_{t-1} + β_t k̂_t,   k̂ = k / √d
//   h_t = S_tᵀ q_t / (max(|n_t · q_t|, exp(-m_t)) + eps)
//
// Layout, row-major and contiguous, P = B·NH sequences: q, k (P, T, d); v, h (P, T, dv); ig, fg (P, T) the gates'
// pre-activations; ms, dens (P, T) m_t and n_t · q_t (written by forward, read by backward); gh (P, T, dv) the
// gradient of h; gq, gk, gv, gig, gfg the gradients of the inputs, laid out as they are.
//
// Loops over a row of S run over contiguous memory with no dependence, so compilers vectorise them; the sums along a
// row (dot) keep eight partial sums in a fixed order, so every build adds in the same order. Every loop is built for
// AVX-512, AVX2 and the baseline (PRIMACY_AVX512): with no fused multiply-add (-ffp-contract=off)
// and no reordered sum, a vector's width changes no bit. A head width of 8, 16 or 32 runs on loops compiled for that
// width (FD below), whose trip counts the compiler knows; the operations and their order are those of any width.
// Measured (one thread, B 64, T 64, 4 heads of 32, compiled_qkv's forward and backward, thread time, three
// alternations): 15.6-16.1 ms -> 9.3-10.7 ms, nearly all of it from the known width.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

// PRIMACY_AVX512, PRIMACY_INLINE: primacy/native/fast_math.h (NativeLibrary puts it on the include path).
#include "fast_math.h"

namespace {

// The gates' exp and log σ are the C library's, in float as in double: a few scalars per position, so speed does not
// ask for primacy::fast_exp here. exp(0) = 1 exactly, so the gate whose exponent is m_t's is exactly 1.
template <typename R>
PRIMACY_INLINE R exp_(R x) { return std::exp(x); }
// log σ(x) = min(x, 0) - log(1 + e^-|x|)
template <typename R>
PRIMACY_INLINE R log_sigmoid(R x) { return (x < R(0) ? x : R(0)) - std::log1p(std::exp(-std::fabs(x))); }
template <typename R>
PRIMACY_INLINE R sigmoid(R x) { return R(1) / (R(1) + std::exp(-x)); }

// Σ_j a[j] b[j]: eight partial sums (j mod 8), added as a tree, then the remainder in order.
template <typename R>
PRIMACY_INLINE R dot(int64_t n, const R* __restrict__ a, const R* __restrict__ b) {
    R acc[8] = {};
    const int64_t whole = n - n % 8;
    for (int64_t j = 0; j < whole; j += 8)
        for (int64_t l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
    R s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int64_t j = whole; j < n; ++j) s += a[j] * b[j];
    return s;
}

// out[r] = dot(n, rows + r n, b) for r < count: float rows eight at a time when n is a multiple of 8, each row's
// eight partial sums on the lanes of one vector as dot keeps them, then the eight vectors transposed so that the same
// tree adds them lane-wise for eight rows at once (the same operations on the same values as dot, so the same bits).
template <typename R>
PRIMACY_INLINE void dots(int64_t count, int64_t n, const R* __restrict__ rows, const R* __restrict__ b,
                         R* __restrict__ out) {
    for (int64_t r = 0; r < count; ++r) out[r] = dot(n, rows + r * n, b);
}
PRIMACY_INLINE void dots(int64_t count, int64_t n, const float* __restrict__ rows, const float* __restrict__ b,
                         float* __restrict__ out) {
    using primacy::F8;
    if (n % 8) return dots<float>(count, n, rows, b, out);
    const int64_t whole = count - count % 8;
    for (int64_t r0 = 0; r0 < whole; r0 += 8) {
        F8 A[8];
        for (int64_t r = 0; r < 8; ++r) {
            F8 acc{};
            for (int64_t j = 0; j < n; j += 8) {
                F8 x, y;
                std::memcpy(&x, rows + (r0 + r) * n + j, sizeof x);
                std::memcpy(&y, b + j, sizeof y);
                acc += x * y;
            }
            A[r] = acc;
        }
        F8 t[8], u[8];
        for (int64_t p = 0; p < 4; ++p) {
            t[2 * p] = __builtin_shufflevector(A[2 * p], A[2 * p + 1], 0, 8, 1, 9, 4, 12, 5, 13);
            t[2 * p + 1] = __builtin_shufflevector(A[2 * p], A[2 * p + 1], 2, 10, 3, 11, 6, 14, 7, 15);
        }
        for (int64_t p = 0; p < 2; ++p) {  // from t[4p .. 4p + 3]: rows 4p .. 4p + 3
            u[4 * p] = __builtin_shufflevector(t[4 * p], t[4 * p + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[4 * p + 1] = __builtin_shufflevector(t[4 * p], t[4 * p + 2], 2, 3, 10, 11, 6, 7, 14, 15);
            u[4 * p + 2] = __builtin_shufflevector(t[4 * p + 1], t[4 * p + 3], 0, 1, 8, 9, 4, 5, 12, 13);
            u[4 * p + 3] = __builtin_shufflevector(t[4 * p + 1], t[4 * p + 3], 2, 3, 10, 11, 6, 7, 14, 15);
        }
        F8 V[8];  // V[l]: lane l of each row's partial sums
        for (int64_t l = 0; l < 4; ++l) {
            V[l] = __builtin_shufflevector(u[l], u[4 + l], 0, 1, 2, 3, 8, 9, 10, 11);
            V[4 + l] = __builtin_shufflevector(u[l], u[4 + l], 4, 5, 6, 7, 12, 13, 14, 15);
        }
        const F8 sum = ((V[0] + V[1]) + (V[2] + V[3])) + ((V[4] + V[5]) + (V[6] + V[7]));
        std::memcpy(out + r0, &sum, sizeof sum);
    }
    for (int64_t r = whole; r < count; ++r) out[r] = dot(n, rows + r * n, b);
}

// One position's gates from m_{t-1} (unused at t = 0), ĩ_t and f̃_t: m_t, α_t, β_t, and the share of m_t's gradient
// that ĩ_t takes (torch.maximum's: 1 where it is the larger, 1/2 on a tie, 0 where smaller).
template <typename R>
struct Gates {
    R m, alpha, beta, share_i;
};
template <typename R>
PRIMACY_INLINE Gates<R> gates(bool first, R m_prev, R ig, R fg) {
    if (first) return {ig, R(0), R(1), R(1)};
    const R carried = m_prev + log_sigmoid(fg);
    const R m = (carried > ig || carried != carried) ? carried : ig;
    const R share = ig > carried ? R(1) : (ig == carried ? R(0.5) : R(0));
    return {m, exp_(carried - m), exp_(ig - m), share};
}

// A row of S = α S + β k̂ vᵀ, and that row's entry of n = α n + β k̂, returned (α ignored on the first position,
// where S and n start at 0); k_hat = k_i / √d.
template <typename R>
PRIMACY_INLINE R update_row(bool first, int64_t dv, const Gates<R>& g, R k_hat, const R* __restrict__ v,
                            R* __restrict__ row, R n) {
    const R a = g.beta * k_hat;
    if (first) {
        for (int64_t j = 0; j < dv; ++j) row[j] = a * v[j];
        return a;
    }
    for (int64_t j = 0; j < dv; ++j) row[j] = g.alpha * row[j] + a * v[j];
    return g.alpha * n + a;
}

// FD: d and dv as a constant (0: as given; the callers pass it where d = dv is a common width)
template <typename R, int64_t FD = 0>
PRIMACY_INLINE void forward(int64_t first, int64_t last, int64_t T, int64_t d_given, int64_t dv_given, R eps,
                            const R* q, const R* k, const R* v, const R* ig, const R* fg, R* h, R* ms, R* dens) {
    const int64_t d = FD ? FD : d_given, dv = FD ? FD : dv_given;
    const R root_d = std::sqrt(R(d));
    std::vector<R> state(d * dv + d);
    R *S = state.data(), *n = S + d * dv;
    for (int64_t p = first; p < last; ++p) {
        R m = R(0);
        for (int64_t t = 0; t < T; ++t) {
            const int64_t at = p * T + t;
            const Gates<R> g = gates(t == 0, m, ig[at], fg[at]);
            m = g.m;
            const R* qt = q + at * d;
            const R* kt = k + at * d;
            const R* vt = v + at * dv;
            R* out = h + at * dv;
            for (int64_t j = 0; j < dv; ++j) out[j] = R(0);
            for (int64_t i = 0; i < d; ++i) {  // S and n updated a row at a time, and Sᵀ q summed from the rows
                R* row = S + i * dv;
                n[i] = update_row(t == 0, dv, g, kt[i] / root_d, vt, row, n[i]);
                const R qi = qt[i];
                for (int64_t j = 0; j < dv; ++j) out[j] += qi * row[j];
            }
            const R den = dot(d, qt, n);
            const R floor = exp_(-m), size = std::fabs(den);
            const R normaliser = (size > floor || size != size ? size : floor) + eps;
            for (int64_t j = 0; j < dv; ++j) out[j] /= normaliser;
            ms[at] = m;
            dens[at] = den;
        }
    }
}

// The gradient (primacy_xlstm.mlstm_compiled states it): a pass forward in time recomputes S and n (the same
// operations as forward, so the same values) for q's gradient, a pass backward carries the gradient of the state
// for k's and v's, and the gates' gradients follow from k · g_k and q · g_q.
template <typename R, int64_t FD = 0>
PRIMACY_INLINE void backward(int64_t first, int64_t last, int64_t T, int64_t d_given, int64_t dv_given, R eps,
                             const R* q, const R* k, const R* v, const R* ig, const R* fg, const R* h, const R* ms,
                             const R* dens, const R* gh, R* gq, R* gk, R* gv, R* gig, R* gfg) {
    const int64_t d = FD ? FD : d_given, dv = FD ? FD : dv_given;
    const R root_d = std::sqrt(R(d));
    std::vector<R> scratch(2 * (d * dv + d) + T * dv + 6 * T);
    R *S = scratch.data(), *n = S + d * dv, *G = n + d, *Gn = G + d * dv, *gnum = Gn + d;
    R *gden = gnum + T * dv, *gm = gden + T, *alphas = gm + T, *betas = alphas + T, *shares = betas + T;
    R* from_k = shares + T;
    for (int64_t p = first; p < last; ++p) {
        const int64_t base = p * T;
        // forward in time: the gradients of Sᵀ q and n · q (gnum, gden), exp(-m)'s (gm, into m), and q's
        for (int64_t t = 0; t < T; ++t) {
            const int64_t at = base + t;
            const Gates<R> g = gates(t == 0, t ? ms[at - 1] : R(0), ig[at], fg[at]);
            alphas[t] = g.alpha;
            betas[t] = g.beta;
            shares[t] = g.share_i;
            const R den = dens[at], floor = exp_(-ms[at]), size = std::fabs(den);
            const R normaliser = (size > floor || size != size ? size : floor) + eps;
            const R* g_out = gh + at * dv;
            R* g_num = gnum + t * dv;
            for (int64_t j = 0; j < dv; ++j) g_num[j] = g_out[j] / normaliser;
            const R g_normaliser = -dot(dv, g_out, h + at * dv) / normaliser;
            const R share_den = size > floor ? R(1) : (size == floor ? R(0.5) : R(0));
            const R sign = den > R(0) ? R(1) : (den < R(0) ? R(-1) : R(0));
            const R g_den = g_normaliser * share_den * sign;
            gden[t] = g_den;
            gm[t] = -(g_normaliser * (R(1) - share_den)) * floor;
            const R* kt = k + at * d;
            const R* vt = v + at * dv;
            R* g_q = gq + at * d;
            for (int64_t i = 0; i < d; ++i) {  // S and n as forward updates them, a row at a time
                R* row = S + i * dv;
                n[i] = update_row(t == 0, dv, g, kt[i] / root_d, vt, row, n[i]);
            }
            dots(d, dv, S, g_num, g_q);  // then q's gradient
            for (int64_t i = 0; i < d; ++i) g_q[i] = g_q[i] + g_den * n[i];
        }
        // backward in time: G, Gn the gradients of S_t, n_t; k's and v's gradients; k · g_k for the gates
        for (int64_t t = T - 1; t >= 0; --t) {
            const int64_t at = base + t;
            const R* qt = q + at * d;
            const R* g_num = gnum + t * dv;
            const bool last_step = t == T - 1;
            const R keep = last_step ? R(0) : alphas[t + 1];
            const R* kt = k + at * d;
            const R* vt = v + at * dv;
            R* g_k = gk + at * d;
            R* g_v = gv + at * dv;
            R k_dot = R(0);
            for (int64_t j = 0; j < dv; ++j) g_v[j] = R(0);
            for (int64_t i = 0; i < d; ++i) {  // G and Gn a row at a time, then that row's share of k's and v's
                R* row = G + i * dv;
                const R qi = qt[i];
                if (last_step) {
                    for (int64_t j = 0; j < dv; ++j) row[j] = qi * g_num[j];
                    Gn[i] = gden[t] * qi;
                } else {
                    for (int64_t j = 0; j < dv; ++j) row[j] = keep * row[j] + qi * g_num[j];
                    Gn[i] = keep * Gn[i] + gden[t] * qi;
                }
                const R a = betas[t] * (kt[i] / root_d);
                for (int64_t j = 0; j < dv; ++j) g_v[j] += a * row[j];
            }
            dots(d, dv, G, vt, g_k);  // G v, row by row
            for (int64_t i = 0; i < d; ++i) {
                const R u = g_k[i] + Gn[i];  // (G v + Gn)_i: the gradient of β k̂_i
                const R k_hat = kt[i] / root_d;
                g_k[i] = betas[t] * u / root_d;
                k_dot += k_hat * (betas[t] * u);
            }
            from_k[t] = k_dot;  // k̂_t · g_k̂_t
        }
        // gates: with b_t = Σ_{1≤j≤t} log σ(f̃_j), a_s = ĩ_s - b_s and g_t = m_t - b_t = max(g_{t-1}, a_t), the output
        // depends on a_s through exp(a_s - g_t) (gradient k̂_s · g_k̂_s), on g_t through those and exp(-b_t - g_t)
        // (-q_t · g_q_t + gm_t), and on b_t through exp(-b_t - g_t) alone (gm_t)
        R carry = R(0), into_b = R(0);
        for (int64_t t = T - 1; t >= 0; --t) {
            const int64_t at = base + t;
            const R total = (gm[t] - dot(d, q + at * d, gq + at * d)) + carry;  // into g_t
            const R g_a = from_k[t] + shares[t] * total;
            carry = (R(1) - shares[t]) * total;
            gig[at] = g_a;
            into_b += gm[t] - g_a;  // Σ_{s≥t} of b_s's gradient: log σ(f̃_t)'s, for t ≥ 1
            gfg[at] = t == 0 ? R(0) : into_b * sigmoid(-fg[at]);
        }
    }
}

// The layer's entry points (mlstm_loop='compiled_qkv'): the cell reading the mLSTM layer's rows and forming q, k, v
// itself. With E = NH d, bs the width of the q, k, v projections' blocks (d / bs of them in a head), the pair
// p = b NH + h, and row (b, t) at (b T + t) E:
//   xc, xm (B, T, E): the convolution's activated output (q's and k's input) and x_mlstm (v's);
//   wq, wk, wv (NB, bs, bs), NB = E / bs: w[n, o, i] the weight from unit n bs + i to unit n bs + o;
//   gates (B, T, 2 NH): ĩ of head h at h, f̃ at NH + h; out (B, T, E): h̃ of head h at h d; ms, dens (P, T) as above;
//   gout, gxc, gxm, ggates: gradients laid out as out, xc, xm, gates; gw (B, 3, NB, bs, bs): each batch element's
//   share of the gradients of wq, wk, wv (its caller sums them over B, so the split across threads changes nothing).
// A pair's q, k, v and gates (and in the backward h̃ and its gradient) are gathered into T rows of scratch and the
// cell's forward or backward above runs on them as on one sequence: the recurrence's arithmetic is the same.

// The blocks of a head as bs rows of d: arranged[i d + j] = w[j / bs, j % bs, i] (forward: out[j] reads input
// unit (j / bs) bs + i through it) or, with transposed, w[j / bs, i, j % bs] (backward: gx[j] reads g's).
template <typename R>
PRIMACY_INLINE void arrange(int64_t d, int64_t bs, bool transposed, const R* __restrict__ w, R* __restrict__ arranged) {
    for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < d; ++j) {
            const int64_t n = j / bs, o = j % bs;
            arranged[i * d + j] = transposed ? w[(n * bs + i) * bs + o] : w[(n * bs + o) * bs + i];
        }
}

// out[j] = Σ_i a[i d + j] x[(j / bs) bs + i], the sum from i = 0 in order: a head's projection by its blocks
// (forward, a = arrange(w)) or the transpose's (backward, a = arrange(w, transposed)). For float blocks of 4 the
// same operations in the same order run on 8 lanes: each lane's input is picked from its 128-bit half, one block.
template <typename R>
PRIMACY_INLINE void grouped(int64_t d, int64_t bs, const R* __restrict__ a, const R* __restrict__ x,
                            R* __restrict__ out) {
    for (int64_t j = 0; j < d; ++j) {
        const R* xs = x + (j / bs) * bs;
        R s = a[j] * xs[0];
        for (int64_t i = 1; i < bs; ++i) s += a[i * d + j] * xs[i];
        out[j] = s;
    }
}
PRIMACY_INLINE void grouped(int64_t d, int64_t bs, const float* __restrict__ a, const float* __restrict__ x,
                            float* __restrict__ out) {
    using primacy::F8;
    if (bs != 4 || d % 8) return grouped<float>(d, bs, a, x, out);
    for (int64_t j = 0; j < d; j += 8) {
        F8 v, a0, a1, a2, a3;
        std::memcpy(&v, x + j, sizeof v);
        std::memcpy(&a0, a + j, sizeof v);
        std::memcpy(&a1, a + d + j, sizeof v);
        std::memcpy(&a2, a + 2 * d + j, sizeof v);
        std::memcpy(&a3, a + 3 * d + j, sizeof v);
        F8 s = a0 * __builtin_shufflevector(v, v, 0, 0, 0, 0, 4, 4, 4, 4);
        s += a1 * __builtin_shufflevector(v, v, 1, 1, 1, 1, 5, 5, 5, 5);
        s += a2 * __builtin_shufflevector(v, v, 2, 2, 2, 2, 6, 6, 6, 6);
        s += a3 * __builtin_shufflevector(v, v, 3, 3, 3, 3, 7, 7, 7, 7);
        std::memcpy(out + j, &s, sizeof s);
    }
}

// acc[i d + j] += g[j] x[(j / bs) bs + i]: one position's share of a head's block gradients, arranged as arrange()
template <typename R>
PRIMACY_INLINE void grouped_outer(int64_t d, int64_t bs, const R* __restrict__ g, const R* __restrict__ x,
                                  R* __restrict__ acc) {
    for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < d; ++j) acc[i * d + j] += g[j] * x[(j / bs) * bs + i];
}
PRIMACY_INLINE void grouped_outer(int64_t d, int64_t bs, const float* __restrict__ g, const float* __restrict__ x,
                                  float* __restrict__ acc) {
    using primacy::F8;
    if (bs != 4 || d % 8) return grouped_outer<float>(d, bs, g, x, acc);
    for (int64_t j = 0; j < d; j += 8) {
        F8 v, gj, c0, c1, c2, c3;
        std::memcpy(&v, x + j, sizeof v);
        std::memcpy(&gj, g + j, sizeof v);
        std::memcpy(&c0, acc + j, sizeof v);
        std::memcpy(&c1, acc + d + j, sizeof v);
        std::memcpy(&c2, acc + 2 * d + j, sizeof v);
        std::memcpy(&c3, acc + 3 * d + j, sizeof v);
        c0 += gj * __builtin_shufflevector(v, v, 0, 0, 0, 0, 4, 4, 4, 4);
        c1 += gj * __builtin_shufflevector(v, v, 1, 1, 1, 1, 5, 5, 5, 5);
        c2 += gj * __builtin_shufflevector(v, v, 2, 2, 2, 2, 6, 6, 6, 6);
        c3 += gj * __builtin_shufflevector(v, v, 3, 3, 3, 3, 7, 7, 7, 7);
        std::memcpy(acc + j, &c0, sizeof v);
        std::memcpy(acc + d + j, &c1, sizeof v);
        std::memcpy(acc + 2 * d + j, &c2, sizeof v);
        std::memcpy(acc + 3 * d + j, &c3, sizeof v);
    }
}

// a pair's rows gathered: q, k from xc and v from xm by the head's arranged blocks (a: q's, k's, v's, bs d each),
// ĩ and f̃ from gates (T rows each)
template <typename R>
PRIMACY_INLINE void gather(int64_t b, int64_t h, int64_t NH, int64_t T, int64_t d, int64_t bs, const R* xc,
                           const R* xm, const R* a, const R* gates, R* q, R* k, R* v, R* ig, R* fg) {
    const int64_t E = NH * d;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * E + h * d;
        grouped(d, bs, a, xc + row, q + t * d);
        grouped(d, bs, a + bs * d, xc + row, k + t * d);
        grouped(d, bs, a + 2 * bs * d, xm + row, v + t * d);
        ig[t] = gates[(b * T + t) * 2 * NH + h];
        fg[t] = gates[(b * T + t) * 2 * NH + NH + h];
    }
}

// the head's blocks of wq, wk, wv arranged (forward, or transposed for the backward) into a (3 bs d)
template <typename R>
PRIMACY_INLINE void arrange_head(int64_t h, int64_t d, int64_t bs, bool transposed, const R* wq, const R* wk,
                                 const R* wv, R* a) {
    const R* ws[3] = {wq, wk, wv};
    for (int64_t w = 0; w < 3; ++w) arrange(d, bs, transposed, ws[w] + h * d * bs, a + w * bs * d);
}

// The layer's output side (mlstm_loop='compiled_layer'), on a head's row h̃ (d) at (b, t): the cell's per-head norm
// (a layer norm over the head's d units: mean, biased variance, 1 / sqrt(var + ln_eps), times wln, xlstm's weight
// 1 + w), the learnable skip and the SiLU gate, hs = (norm(h̃) + skip ⊙ xc) ⊙ silu(z), at the row's columns c of
// (B, T, E). The backward takes hs's gradient and writes z's and the gradient of h̃ (for the cell), the skip's share
// of xc's gradient, and each batch element's share of skip's and wln's gradients (parts (B, 2, E), summed over t in
// order; the caller sums them over B).
template <typename R>
struct Tail {
    const R *z, *skip, *wln;
    R ln_eps;
    R* hs;  // forward: the output
    const R* ghs;  // backward: hs's gradient, then what it writes
    R *gz, *parts;
};

// Σ_j a[j] over n: eight partial sums (j mod 8), added as dot adds them (a fixed order, so every build's bits)
template <typename R>
PRIMACY_INLINE R sum8(int64_t n, const R* __restrict__ a) {
    R acc[8] = {};
    const int64_t whole = n - n % 8;
    for (int64_t j = 0; j < whole; j += 8)
        for (int64_t l = 0; l < 8; ++l) acc[l] += a[j + l];
    R s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int64_t j = whole; j < n; ++j) s += a[j];
    return s;
}

// nhat (d) = (h - mean) / sqrt(var + ln_eps), the biased variance; returns 1 / sqrt(var + ln_eps). sq: scratch (d)
template <typename R>
PRIMACY_INLINE R norm_row(int64_t d, const R* __restrict__ h, R ln_eps, R* __restrict__ nhat, R* __restrict__ sq) {
    const R mean = sum8(d, h) / R(d);
    for (int64_t j = 0; j < d; ++j) {
        nhat[j] = h[j] - mean;
        sq[j] = nhat[j] * nhat[j];
    }
    const R rstd = R(1) / std::sqrt(sum8(d, sq) / R(d) + ln_eps);
    for (int64_t j = 0; j < d; ++j) nhat[j] *= rstd;
    return rstd;
}

// work: scratch (2 d)
template <typename R>
PRIMACY_INLINE void tail_forward(int64_t d, const Tail<R>& tail, const R* __restrict__ h, const R* __restrict__ xc,
                                 int64_t row, int64_t col, R* __restrict__ work) {
    R* __restrict__ nhat = work;
    norm_row(d, h, tail.ln_eps, nhat, work + d);
    const R* __restrict__ z = tail.z + row;
    const R* __restrict__ wln = tail.wln + col;
    const R* __restrict__ skip = tail.skip + col;
    const R* __restrict__ x = xc + row;
    R* __restrict__ hs = tail.hs + row;
    for (int64_t j = 0; j < d; ++j) hs[j] = (nhat[j] * wln[j] + skip[j] * x[j]) * (z[j] * primacy::sigmoid(z[j]));
}

// gh (d): the gradient of h̃; gxs (d): the skip's share of xc's gradient; parts: this batch element's (2, E);
// work: scratch (3 d)
template <typename R>
PRIMACY_INLINE void tail_backward(int64_t d, int64_t E, const Tail<R>& tail, const R* __restrict__ h,
                                  const R* __restrict__ xc, int64_t row, int64_t col, R* __restrict__ parts,
                                  R* __restrict__ work, R* __restrict__ gh, R* __restrict__ gxs) {
    R *__restrict__ nhat = work, *__restrict__ gnhat = work + d, *__restrict__ prod = work + 2 * d;
    const R rstd = norm_row(d, h, tail.ln_eps, nhat, prod);
    const R* __restrict__ z = tail.z + row;
    const R* __restrict__ wln = tail.wln + col;
    const R* __restrict__ skip = tail.skip + col;
    const R* __restrict__ x = xc + row;
    const R* __restrict__ ghs = tail.ghs + row;
    R* __restrict__ gz = tail.gz + row;
    R* __restrict__ g_skip = parts + col;
    R* __restrict__ g_wln = parts + E + col;
    for (int64_t j = 0; j < d; ++j) {
        const R sig = primacy::sigmoid(z[j]), gate = z[j] * sig;
        const R g_s = ghs[j] * gate;  // into norm(h̃) + skip ⊙ xc
        gz[j] = ghs[j] * (nhat[j] * wln[j] + skip[j] * x[j]) * (sig * (R(1) + z[j] * (R(1) - sig)));
        g_skip[j] += g_s * x[j];
        g_wln[j] += g_s * nhat[j];
        gxs[j] = g_s * skip[j];
        gnhat[j] = g_s * wln[j];
        prod[j] = gnhat[j] * nhat[j];
    }
    const R mean_g = sum8(d, gnhat) / R(d), mean_gn = sum8(d, prod) / R(d);
    for (int64_t j = 0; j < d; ++j) gh[j] = rstd * ((gnhat[j] - mean_g) - nhat[j] * mean_gn);
}

template <typename R, int64_t FD = 0>
PRIMACY_INLINE void layer_forward(int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d_given, int64_t bs,
                                  R eps, const R* xc, const R* xm, const R* wq, const R* wk, const R* wv,
                                  const R* gates, R* out, R* ms, R* dens, const Tail<R>* tail = nullptr) {
    const int64_t d = FD ? FD : d_given;
    const int64_t E = NH * d;
    std::vector<R> scratch(4 * T * d + 2 * T + 3 * bs * d + 2 * d);
    R *q = scratch.data(), *k = q + T * d, *v = k + T * d, *h = v + T * d, *ig = h + T * d, *fg = ig + T;
    R* a = fg + T;
    for (int64_t p = first; p < last; ++p) {
        const int64_t b = p / NH, head = p % NH;
        arrange_head(head, d, bs, false, wq, wk, wv, a);
        gather(b, head, NH, T, d, bs, xc, xm, a, gates, q, k, v, ig, fg);
        forward<R, FD>(0, 1, T, d, d, eps, q, k, v, ig, fg, h, ms + p * T, dens + p * T);
        for (int64_t t = 0; t < T; ++t) {
            const int64_t row = (b * T + t) * E + head * d;
            std::memcpy(out + row, h + t * d, sizeof(R) * d);
            if (tail) tail_forward(d, *tail, h + t * d, xc, row, head * d, a + 3 * bs * d);
        }
    }
}

template <typename R, int64_t FD = 0>
PRIMACY_INLINE void layer_backward(int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d_given, int64_t bs,
                                   R eps, const R* xc, const R* xm, const R* wq, const R* wk, const R* wv,
                                   const R* gates, const R* out, const R* ms, const R* dens, const R* gout, R* gxc,
                                   R* gxm, R* ggates, R* gw, const Tail<R>* tail = nullptr) {
    const int64_t d = FD ? FD : d_given;
    const int64_t E = NH * d, NB = E / bs;
    std::vector<R> scratch(8 * T * d + 4 * T + 9 * bs * d + d + (tail ? T * d + 3 * d : 0));
    R *q = scratch.data(), *k = q + T * d, *v = k + T * d, *h = v + T * d, *gh = h + T * d, *gq = gh + T * d;
    R *gk = gq + T * d, *gv = gk + T * d, *ig = gv + T * d, *fg = ig + T, *gig = fg + T, *gfg = gig + T;
    R *a = gfg + T, *back = a + 3 * bs * d, *acc = back + 3 * bs * d, *tmp = acc + 3 * bs * d;
    for (int64_t p = first; p < last; ++p) {
        const int64_t b = p / NH, head = p % NH;
        arrange_head(head, d, bs, false, wq, wk, wv, a);
        arrange_head(head, d, bs, true, wq, wk, wv, back);
        gather(b, head, NH, T, d, bs, xc, xm, a, gates, q, k, v, ig, fg);
        R* gxs = tmp + d;  // with the output side: the skip's share of xc's gradient (T d), then scratch (3 d)
        for (int64_t t = 0; t < T; ++t) {
            const int64_t row = (b * T + t) * E + head * d;
            std::memcpy(h + t * d, out + row, sizeof(R) * d);
            if (tail)
                tail_backward(d, E, *tail, h + t * d, xc, row, head * d, tail->parts + b * 2 * E, gxs + T * d,
                              gh + t * d, gxs + t * d);
            else
                std::memcpy(gh + t * d, gout + row, sizeof(R) * d);
        }
        backward<R, FD>(0, 1, T, d, d, eps, q, k, v, ig, fg, h, ms + p * T, dens + p * T, gh, gq, gk, gv, gig, gfg);
        for (int64_t j = 0; j < 3 * bs * d; ++j) acc[j] = R(0);
        for (int64_t t = 0; t < T; ++t) {
            const int64_t row = (b * T + t) * E + head * d;
            grouped(d, bs, back, gq + t * d, gxc + row);  // q's share of x_conv's gradient, then k's added
            grouped(d, bs, back + bs * d, gk + t * d, tmp);
            for (int64_t j = 0; j < d; ++j) gxc[row + j] += tmp[j];
            if (tail)
                for (int64_t j = 0; j < d; ++j) gxc[row + j] += gxs[t * d + j];
            grouped(d, bs, back + 2 * bs * d, gv + t * d, gxm + row);
            ggates[(b * T + t) * 2 * NH + head] = gig[t];
            ggates[(b * T + t) * 2 * NH + NH + head] = gfg[t];
            grouped_outer(d, bs, gq + t * d, xc + row, acc);  // the blocks' gradients, summed over t in order
            grouped_outer(d, bs, gk + t * d, xc + row, acc + bs * d);
            grouped_outer(d, bs, gv + t * d, xm + row, acc + 2 * bs * d);
        }
        // this batch element's share of the weights' gradients: acc[w][i d + j] is w[j / bs, j % bs, i]'s
        for (int64_t w = 0; w < 3; ++w)
            for (int64_t i = 0; i < bs; ++i)
                for (int64_t j = 0; j < d; ++j)
                    gw[((b * 3 + w) * NB + head * (d / bs) + j / bs) * bs * bs + (j % bs) * bs + i] =
                        acc[(w * bs + i) * d + j];
    }
}

// The layer's causal depthwise convolution and its SiLU (mlstm_loop='compiled_conv'), per batch element b in
// [first, last): x (B, T, C) x_mlstm, taps (K, C) (taps[j, c] multiplies x_{t-(K-1)+j}, zeros before the start),
// bias (C) -> out (B, T, C) = silu(pre), pre = (Σ_j taps[j] x_{t-(K-1)+j}, from j = 0 in order) + bias. The backward
// recomputes pre, writes gx and each batch element's share of the taps' and the bias's gradients (gw_parts (B, K, C),
// gb_parts (B, C), summed over t in order; the caller sums them over B, so the split across threads changes nothing).
// float32's σ is fast_exp's (primacy/native/fast_math.h), float64's the C library's.
// pre_t (C) into row: Σ_j taps[j] x_{t-(K-1)+j} over the j whose position is ≥ 0, from the first in order, + bias
template <typename R>
PRIMACY_INLINE void conv_pre(int64_t C, int64_t K, const R* __restrict__ x, const R* __restrict__ taps,
                             const R* __restrict__ bias, int64_t t, R* __restrict__ row) {
    const int64_t j0 = t >= K - 1 ? 0 : K - 1 - t;  // the first tap on a position ≥ 0
    const R* xs = x + (t - (K - 1) + j0) * C;
    for (int64_t c = 0; c < C; ++c) row[c] = taps[j0 * C + c] * xs[c];
    for (int64_t j = j0 + 1; j < K; ++j) {
        xs += C;
        for (int64_t c = 0; c < C; ++c) row[c] = row[c] + taps[j * C + c] * xs[c];
    }
    for (int64_t c = 0; c < C; ++c) row[c] = row[c] + bias[c];
}

template <typename R>
PRIMACY_INLINE void conv_forward(int64_t first, int64_t last, int64_t T, int64_t C, int64_t K, const R* x,
                                 const R* taps, const R* bias, R* out) {
    for (int64_t b = first; b < last; ++b)
        for (int64_t t = 0; t < T; ++t) {
            R* row = out + (b * T + t) * C;
            conv_pre(C, K, x + b * T * C, taps, bias, t, row);
            for (int64_t c = 0; c < C; ++c) row[c] = row[c] * primacy::sigmoid(row[c]);
        }
}

template <typename R>
PRIMACY_INLINE void conv_backward(int64_t first, int64_t last, int64_t T, int64_t C, int64_t K, const R* x,
                                  const R* taps, const R* bias, const R* gout, R* gx, R* gw_parts, R* gb_parts) {
    std::vector<R> scratch(T * C);
    R* gp = scratch.data();  // the gradient of pre, one batch element's
    for (int64_t b = first; b < last; ++b) {
        const R* xb = x + b * T * C;
        const R* gb = gout + b * T * C;
        for (int64_t t = 0; t < T; ++t) {
            R* row = gp + t * C;
            conv_pre(C, K, xb, taps, bias, t, row);
            for (int64_t c = 0; c < C; ++c) {  // silu'(pre) = σ (1 + pre (1 - σ))
                const R pre = row[c], sig = primacy::sigmoid(pre);
                row[c] = gb[t * C + c] * (sig * (R(1) + pre * (R(1) - sig)));
            }
        }
        R* gxb = gx + b * T * C;
        for (int64_t t = 0; t < T; ++t) {  // x_t reaches pre_u, u = t + (K-1) - j < T, through taps[j]: u in order
            R* row = gxb + t * C;
            const int64_t first_j = K - 1, last_j = t + K - T > 0 ? t + K - T : 0;  // u ≤ T - 1: j ≥ t + K - T
            const R* gs = gp + t * C;  // u = t for j = K - 1
            for (int64_t c = 0; c < C; ++c) row[c] = taps[first_j * C + c] * gs[c];
            for (int64_t j = first_j - 1; j >= last_j; --j) {
                gs += C;
                for (int64_t c = 0; c < C; ++c) row[c] = row[c] + taps[j * C + c] * gs[c];
            }
        }
        R* gw = gw_parts + b * K * C;
        R* gbias = gb_parts + b * C;
        for (int64_t n = 0; n < K * C; ++n) gw[n] = R(0);
        for (int64_t c = 0; c < C; ++c) gbias[c] = R(0);
        for (int64_t t = 0; t < T; ++t) {
            const R* g = gp + t * C;
            for (int64_t j = t >= K - 1 ? 0 : K - 1 - t; j < K; ++j) {
                const R* xs = xb + (t - (K - 1) + j) * C;
                R* w = gw + j * C;
                for (int64_t c = 0; c < C; ++c) w[c] = w[c] + g[c] * xs[c];
            }
            for (int64_t c = 0; c < C; ++c) gbias[c] = gbias[c] + g[c];
        }
    }
}

// The entry points' bodies: in float32, the loops compiled for a head width of 8, 16 or 32 (FD) where d = dv is one,
// else for any width. A switch in a function inlined into each entry point, so every build compiles them for its
// instruction set (a lambda would be a function of its own, built for the baseline). float64, which verifies the
// float32 loops, runs the loops for any width only: a known width changes no operation nor its order, so no bit
// (checked: every compiled path's outputs and gradients, d 8 to 64), and its three widths more took a quarter of the
// library's build (86.7 -> 66.3 s on one core of a busy machine).
template <typename R>
constexpr bool SPECIALISED = std::is_same_v<R, float>;

PRIMACY_INLINE int64_t common_width(int64_t d, int64_t dv) {
    return d == dv && (d == 8 || d == 16 || d == 32) ? d : 0;
}

template <typename R>
PRIMACY_INLINE void cell_forward(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, R eps, const R* q,
                                 const R* k, const R* v, const R* ig, const R* fg, R* h, R* ms, R* dens) {
    if constexpr (SPECIALISED<R>) {
        switch (common_width(d, dv)) {
            case 8: return forward<R, 8>(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens);
            case 16: return forward<R, 16>(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens);
            case 32: return forward<R, 32>(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens);
        }
    }
    return forward<R, 0>(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens);
}

template <typename R>
PRIMACY_INLINE void cell_backward(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, R eps, const R* q,
                                  const R* k, const R* v, const R* ig, const R* fg, const R* h, const R* ms,
                                  const R* dens, const R* gh, R* gq, R* gk, R* gv, R* gig, R* gfg) {
#define PRIMACY_CELL_BACKWARD(FD) \
    backward<R, FD>(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens, gh, gq, gk, gv, gig, gfg)
    if constexpr (SPECIALISED<R>) {
        switch (common_width(d, dv)) {
            case 8: return PRIMACY_CELL_BACKWARD(8);
            case 16: return PRIMACY_CELL_BACKWARD(16);
            case 32: return PRIMACY_CELL_BACKWARD(32);
        }
    }
    return PRIMACY_CELL_BACKWARD(0);
#undef PRIMACY_CELL_BACKWARD
}

template <typename R>
PRIMACY_INLINE void layer_forward_any(int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, R eps,
                                      const R* xc, const R* xm, const R* wq, const R* wk, const R* wv, const R* gates,
                                      R* out, R* ms, R* dens, const Tail<R>* tail = nullptr) {
#define PRIMACY_LAYER_FORWARD(FD) \
    layer_forward<R, FD>(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, tail)
    if constexpr (SPECIALISED<R>) {
        switch (common_width(d, d)) {
            case 8: return PRIMACY_LAYER_FORWARD(8);
            case 16: return PRIMACY_LAYER_FORWARD(16);
            case 32: return PRIMACY_LAYER_FORWARD(32);
        }
    }
    return PRIMACY_LAYER_FORWARD(0);
#undef PRIMACY_LAYER_FORWARD
}

template <typename R>
PRIMACY_INLINE void layer_backward_any(int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs,
                                       R eps, const R* xc, const R* xm, const R* wq, const R* wk, const R* wv,
                                       const R* gates, const R* out, const R* ms, const R* dens, const R* gout,
                                       R* gxc, R* gxm, R* ggates, R* gw, const Tail<R>* tail = nullptr) {
#define PRIMACY_LAYER_BACKWARD(FD) \
    layer_backward<R, FD>(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, gout, gxc, gxm, \
                          ggates, gw, tail)
    if constexpr (SPECIALISED<R>) {
        switch (common_width(d, d)) {
            case 8: return PRIMACY_LAYER_BACKWARD(8);
            case 16: return PRIMACY_LAYER_BACKWARD(16);
            case 32: return PRIMACY_LAYER_BACKWARD(32);
        }
    }
    return PRIMACY_LAYER_BACKWARD(0);
#undef PRIMACY_LAYER_BACKWARD
}

// The layer's loops are built once per type and instruction set (layer_forward_f32, ...), with or without the output
// side (tail null): the entry points below call them rather than inline them twice (66.3 -> 42.6 s, the same bits).
#define PRIMACY_LAYER_BODIES(R, SUFFIX)                                                                               \
    PRIMACY_AVX512 void layer_forward_##SUFFIX(                                                                       \
        int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, double eps, const R* xc,          \
        const R* xm, const R* wq, const R* wk, const R* wv, const R* gates, R* out, R* ms, R* dens,                  \
        const Tail<R>* tail) {                                                                                        \
        layer_forward_any(first, last, NH, T, d, bs, R(eps), xc, xm, wq, wk, wv, gates, out, ms, dens, tail);         \
    }                                                                                                                 \
    PRIMACY_AVX512 void layer_backward_##SUFFIX(                                                                      \
        int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, double eps, const R* xc,          \
        const R* xm, const R* wq, const R* wk, const R* wv, const R* gates, const R* out, const R* ms,               \
        const R* dens, const R* gout, R* gxc, R* gxm, R* ggates, R* gw, const Tail<R>* tail) {                       \
        layer_backward_any(first, last, NH, T, d, bs, R(eps), xc, xm, wq, wk, wv, gates, out, ms, dens, gout, gxc,    \
                           gxm, ggates, gw, tail);                                                                    \
    }
PRIMACY_LAYER_BODIES(float, f32)
PRIMACY_LAYER_BODIES(double, f64)

}  // namespace

extern "C" {

int primacy_mlstm_abi() { return 4; }

#define PRIMACY_CELL_ENTRIES(R, SUFFIX)                                                                               \
    PRIMACY_AVX512 void primacy_mlstm_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, \
                                                       double eps, const R* q, const R* k, const R* v, const R* ig,   \
                                                       const R* fg, R* h, R* ms, R* dens) {                           \
        cell_forward(first, last, T, d, dv, R(eps), q, k, v, ig, fg, h, ms, dens);                                    \
    }                                                                                                                 \
    PRIMACY_AVX512 void primacy_mlstm_backward_##SUFFIX(                                                              \
        int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, double eps, const R* q, const R* k,           \
        const R* v, const R* ig, const R* fg, const R* h, const R* ms, const R* dens, const R* gh, R* gq, R* gk,      \
        R* gv, R* gig, R* gfg) {                                                                                      \
        cell_backward(first, last, T, d, dv, R(eps), q, k, v, ig, fg, h, ms, dens, gh, gq, gk, gv, gig, gfg);         \
    }
PRIMACY_CELL_ENTRIES(float, f32)
PRIMACY_CELL_ENTRIES(double, f64)

#define PRIMACY_LAYER_ENTRIES(R, SUFFIX)                                                                              \
    void primacy_mlstm_layer_forward_##SUFFIX(int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d,          \
                                              int64_t bs, double eps, const R* xc, const R* xm, const R* wq,          \
                                              const R* wk, const R* wv, const R* gates, R* out, R* ms, R* dens) {     \
        layer_forward_##SUFFIX(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, nullptr);    \
    }                                                                                                                 \
    void primacy_mlstm_layer_backward_##SUFFIX(                                                                       \
        int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, double eps, const R* xc,          \
        const R* xm, const R* wq, const R* wk, const R* wv, const R* gates, const R* out, const R* ms,               \
        const R* dens, const R* gout, R* gxc, R* gxm, R* ggates, R* gw) {                                             \
        layer_backward_##SUFFIX(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, gout, gxc,  \
                                gxm, ggates, gw, nullptr);                                                            \
    }
PRIMACY_LAYER_ENTRIES(float, f32)
PRIMACY_LAYER_ENTRIES(double, f64)

// mlstm_loop='compiled_layer': the layer's entry points with its output side (Tail): z (B, T, E), skip and wln (E),
// ln_eps; forward: hs (B, T, E) besides out (h̃, kept for the backward); backward: ghs (B, T, E) in place of gout,
// gz (B, T, E), parts (B, 2, E) zeroed by the caller
#define PRIMACY_TAIL_ENTRIES(R, SUFFIX)                                                                               \
    void primacy_mlstm_tail_forward_##SUFFIX(                                                                         \
        int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, double eps, const R* xc,          \
        const R* xm, const R* wq, const R* wk, const R* wv, const R* gates, R* out, R* ms, R* dens, const R* z,       \
        const R* skip, const R* wln, double ln_eps, R* hs) {                                                          \
        const Tail<R> tail{z, skip, wln, R(ln_eps), hs, nullptr, nullptr, nullptr};                                   \
        layer_forward_##SUFFIX(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, &tail);      \
    }                                                                                                                 \
    void primacy_mlstm_tail_backward_##SUFFIX(                                                                        \
        int64_t first, int64_t last, int64_t NH, int64_t T, int64_t d, int64_t bs, double eps, const R* xc,          \
        const R* xm, const R* wq, const R* wk, const R* wv, const R* gates, const R* out, const R* ms,               \
        const R* dens, R* gxc, R* gxm, R* ggates, R* gw, const R* z, const R* skip, const R* wln, double ln_eps,      \
        const R* ghs, R* gz, R* parts) {                                                                              \
        const Tail<R> tail{z, skip, wln, R(ln_eps), nullptr, ghs, gz, parts};                                         \
        layer_backward_##SUFFIX(first, last, NH, T, d, bs, eps, xc, xm, wq, wk, wv, gates, out, ms, dens, ghs, gxc,   \
                                gxm, ggates, gw, &tail);                                                              \
    }
PRIMACY_TAIL_ENTRIES(float, f32)
PRIMACY_TAIL_ENTRIES(double, f64)

#define PRIMACY_CONV_ENTRIES(R, SUFFIX)                                                                               \
    PRIMACY_AVX512 void primacy_mlstm_conv_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t C,        \
                                                            int64_t K, const R* x, const R* taps, const R* bias,      \
                                                            R* out) {                                                 \
        conv_forward(first, last, T, C, K, x, taps, bias, out);                                                       \
    }                                                                                                                 \
    PRIMACY_AVX512 void primacy_mlstm_conv_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t C,       \
                                                             int64_t K, const R* x, const R* taps, const R* bias,     \
                                                             const R* gout, R* gx, R* gw_parts, R* gb_parts) {        \
        conv_backward(first, last, T, C, K, x, taps, bias, gout, gx, gw_parts, gb_parts);                            \
    }
PRIMACY_CONV_ENTRIES(float, f32)
PRIMACY_CONV_ENTRIES(double, f64)

}  // extern "C"
