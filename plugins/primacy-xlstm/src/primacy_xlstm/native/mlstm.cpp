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
// row (dot) keep eight partial sums in a fixed order, so every build adds in the same order.

#include <cmath>
#include <cstdint>
#include <vector>

// PRIMACY_CLONES, PRIMACY_INLINE: primacy/native/fast_math.h (NativeLibrary puts it on the include path).
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

template <typename R>
PRIMACY_INLINE void forward(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, R eps, const R* q,
                            const R* k, const R* v, const R* ig, const R* fg, R* h, R* ms, R* dens) {
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
template <typename R>
PRIMACY_INLINE void backward(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv, R eps, const R* q,
                             const R* k, const R* v, const R* ig, const R* fg, const R* h, const R* ms,
                             const R* dens, const R* gh, R* gq, R* gk, R* gv, R* gig, R* gfg) {
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
            for (int64_t i = 0; i < d; ++i) {  // S and n as forward updates them, a row at a time, then q's gradient
                R* row = S + i * dv;
                n[i] = update_row(t == 0, dv, g, kt[i] / root_d, vt, row, n[i]);
                g_q[i] = dot(dv, row, g_num) + g_den * n[i];
            }
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
                const R u = dot(dv, row, vt) + Gn[i];  // (G v + Gn)_i: the gradient of β k̂_i
                const R k_hat = kt[i] / root_d;
                const R a = betas[t] * k_hat;
                for (int64_t j = 0; j < dv; ++j) g_v[j] += a * row[j];
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

}  // namespace

extern "C" {

int primacy_mlstm_abi() { return 1; }

PRIMACY_CLONES void primacy_mlstm_forward_f32(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv,
                                              double eps, const float* q, const float* k, const float* v,
                                              const float* ig, const float* fg, float* h, float* ms, float* dens) {
    forward(first, last, T, d, dv, float(eps), q, k, v, ig, fg, h, ms, dens);
}
PRIMACY_CLONES void primacy_mlstm_forward_f64(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv,
                                              double eps, const double* q, const double* k, const double* v,
                                              const double* ig, const double* fg, double* h, double* ms,
                                              double* dens) {
    forward(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens);
}
PRIMACY_CLONES void primacy_mlstm_backward_f32(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv,
                                               double eps, const float* q, const float* k, const float* v,
                                               const float* ig, const float* fg, const float* h, const float* ms,
                                               const float* dens, const float* gh, float* gq, float* gk, float* gv,
                                               float* gig, float* gfg) {
    backward(first, last, T, d, dv, float(eps), q, k, v, ig, fg, h, ms, dens, gh, gq, gk, gv, gig, gfg);
}
PRIMACY_CLONES void primacy_mlstm_backward_f64(int64_t first, int64_t last, int64_t T, int64_t d, int64_t dv,
                                               double eps, const double* q, const double* k, const double* v,
                                               const double* ig, const double* fg, const double* h, const double* ms,
                                               const double* dens, const double* gh, double* gq, double* gk,
                                               double* gv, double* gig, double* gfg) {
    backward(first, last, T, d, dv, eps, q, k, v, ig, fg, h, ms, dens, gh, gq, gk, gv, gig, gfg);
}

}  // extern "C"
