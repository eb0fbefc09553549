// The sLSTM recurrence over a sequence, forward and backward, as plain loops over contiguous CPU arrays
// (primacy_xlstm.compiled; the map and its gradient are primacy_xlstm.slstm's, which states them).
//
// Each call handles the batch elements [first, last); elements are independent, so callers split the batch across
// threads, and each element's arithmetic is the same whatever the split. Nothing is allocated here but one element's
// gradient carries in the backward.
//
// Layout, row-major and contiguous (H = NH dh, a head's 4 dh gates (i, f, z, o) contiguous, "head-major"):
//   xb, raws, graws (T, B, 4H): pre-activations without / with the recurrent input, and their gradient;
//   states (4, T + 1, B, H): (y, c, n, m) before the first step (given) and after each step (written);
//   rt (NH, dh, 4dh): rt[h, j, g dh + k] the weight from unit j of head h to gate g's unit k (forward);
//   r (NH, 4dh, dh): the same weights transposed, xlstm's own kernel (backward);
//   gy_out (T, B, H) the gradient of y after each step alone, or g_all (4, T + 1, B, H) of every state (one of them
//   null); gstates (4, B, H) the gradient of the initial states.
//
// The "gates" entry points (slstm_loop='compiled_gates') also form the pre-activations from the layer's inputs, per
// head: rows (T, B, 2D) are (x_conv | x) at each position; wt (NH, dh, 4dh) as rt, wt[h, j, g dh + k] the weight from
// unit j of head h of gate g's input (x_conv for i and f, x for z and o) to gate g's unit k; w (NH, 4dh, dh) the same
// transposed (backward); bias (4H) head-major. The backward also writes grows (T, B, 2D), the gradient of rows.
//
// Loops over a head's units carry no dependence and contain no branch (the clamps, maxima and ties are selects), so
// compilers vectorise them; the recurrent products run as sums of rows, each in a fixed order.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// fast_exp, log1p_unit and sigmoid, PRIMACY_AVX512 and PRIMACY_INLINE: primacy's shared header
// (primacy/native/fast_math.h, on the include path NativeLibrary gives the compiler). fast_exp(0) = 1 exactly, which
// the gates' ties rely on (the gate whose exponent is m_t's is exactly 1).
#include "fast_math.h"

// Entry points are built for AVX-512, AVX2 and the baseline (PRIMACY_AVX512): the loops over a head's 4 dh gates run
// on 16 floats at once (measured, one thread, B 64, T 64, 4 heads of 16, the gates path forward and backward: 10.0 ->
// 6.8 ms).

namespace {

using primacy::fast_exp;
using primacy::log1p_unit;
using primacy::sigmoid;

// log σ(x) = min(x, 0) - log(1 + e^-|x|); float: log1p_unit's series, float64: the C library's functions, so that
// it equals PyTorch's loop to rounding.
PRIMACY_INLINE float log_sigmoid(float x) { return (x < 0.0f ? x : 0.0f) - log1p_unit(fast_exp(x < 0.0f ? x : -x)); }
PRIMACY_INLINE double log_sigmoid(double x) { return (x < 0.0 ? x : 0.0) - std::log1p(std::exp(-std::fabs(x))); }
// tanh(x) = sign(x) (1 - e^-2|x|) / (1 + e^-2|x|): absolute error of a few float ulp near 0.
PRIMACY_INLINE float tanh_(float x) {
    const float e = fast_exp(-2.0f * (x < 0.0f ? -x : x));
    const float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}
PRIMACY_INLINE double tanh_(double x) { return std::tanh(x); }

// torch.max(a, b) (NaN if either is), torch.clamp(e, max=1) (NaN stays), and the shares of the gradient their
// ties give: max gives a 1 where a > b, 1/2 on a tie, 0 where less (1 with a NaN); min(e, 1) gives e 1 where e < 1,
// 1/2 at 1, 0 above.
template <typename R> PRIMACY_INLINE R max_(R a, R b) { return (a > b || a != a) ? a : b; }
template <typename R> PRIMACY_INLINE R min1(R e) { return e > R(1) ? R(1) : e; }
template <typename R> PRIMACY_INLINE R max_share(R a, R b) {
    const R below = a < b ? R(0) : R(1);
    return a == b ? R(0.5) : below;
}
template <typename R> PRIMACY_INLINE R min1_share(R e) {
    const R above = e > R(1) ? R(0) : R(1);
    return e == R(1) ? R(0.5) : above;
}

// One head's step: raw (4 dh) += its recurrent input from y (dh), a sum of rows of rt in the order of j.
template <typename R>
PRIMACY_INLINE void recurrent_input(int64_t dh, const R* __restrict__ rt, const R* __restrict__ y,
                                    R* __restrict__ raw) {
    for (int64_t j = 0; j < dh; ++j) {
        const R yj = y[j];
        const R* row = rt + j * 4 * dh;
        for (int64_t g = 0; g < 4 * dh; ++g) raw[g] += row[g] * yj;
    }
}

// One head's states after a step from its pre-activations (4 dh) and the states before (dh each).
template <typename R>
PRIMACY_INLINE void pointwise(int64_t dh, bool from_zero, const R* __restrict__ raw, const R* __restrict__ c0,
                              const R* __restrict__ n0, const R* __restrict__ m0, R* __restrict__ y, R* __restrict__ c,
                              R* __restrict__ n, R* __restrict__ m) {
    for (int64_t k = 0; k < dh; ++k) {
        const R ir = raw[k], fr = raw[dh + k], zr = raw[2 * dh + k], orr = raw[3 * dh + k];
        const R lfm = log_sigmoid(fr) + m0[k];
        const R mt = from_zero ? ir : max_(ir, lfm);
        const R ig = min1(fast_exp(ir - mt)), fg = min1(fast_exp(lfm - mt));
        const R ct = fg * c0[k] + ig * tanh_(zr);
        const R nt = ig + fg * n0[k];
        c[k] = ct;
        n[k] = nt;
        m[k] = mt;
        y[k] = sigmoid(orr) * ct / nt;
    }
}

// DH: the head width as a constant (0: dh as given), so that a common width's loops have a known length (forward_any)
template <typename R, int64_t DH>
PRIMACY_INLINE void forward(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh_given,
                            int64_t first_from_zero, const R* xb, const R* rt, R* raws, R* states) {
    const int64_t dh = DH ? DH : dh_given;
    const int64_t H = NH * dh, S = (T + 1) * B * H;  // S: the stride between the four states
    for (int64_t t = 0; t < T; ++t) {  // the batch elements innermost: their rows are adjacent in memory
        for (int64_t b = first; b < last; ++b) {
            const R* before = states + (t * B + b) * H;
            R* after = states + ((t + 1) * B + b) * H;
            R* raw = raws + (t * B + b) * 4 * H;
            std::memcpy(raw, xb + (t * B + b) * 4 * H, sizeof(R) * 4 * H);
            for (int64_t h = 0; h < NH; ++h) {
                R* rh = raw + h * 4 * dh;
                const int64_t u = h * dh;
                recurrent_input(dh, rt + h * dh * 4 * dh, before + u, rh);
                pointwise(dh, t == 0 && first_from_zero, rh, before + S + u, before + 2 * S + u, before + 3 * S + u,
                          after + u, after + S + u, after + 2 * S + u, after + 3 * S + u);
            }
        }
    }
}

// One head's gradient step, last step first: from the carries g (y, c, n, m after step t; dh each) and the
// pre-activations and states, the gradient of the pre-activations (graw, 4 dh), and the carries into the states
// before step t, except y's (gc, gn, gm updated in place; y's is formed from graw by the caller).
template <typename R>
PRIMACY_INLINE void pointwise_backward(int64_t dh, bool from_zero, const R* __restrict__ raw,
                                       const R* __restrict__ c0, const R* __restrict__ n0, const R* __restrict__ m0,
                                       const R* __restrict__ y1, const R* __restrict__ c1, const R* __restrict__ n1,
                                       const R* __restrict__ m1, const R* __restrict__ gy, R* __restrict__ gc,
                                       R* __restrict__ gn, R* __restrict__ gm, R* __restrict__ graw) {
    const R keep = from_zero ? R(0) : R(1);  // on the first step from a zero state m = ĩ: its shares are 1 and 0
    for (int64_t k = 0; k < dh; ++k) {
        const R ir = raw[k], fr = raw[dh + k], zr = raw[2 * dh + k], orr = raw[3 * dh + k];
        const R lfm = m0[k] + log_sigmoid(fr);
        const R e_i = fast_exp(ir - m1[k]), e_f = fast_exp(lfm - m1[k]);
        const R to_i = max_share(ir, lfm) * keep + R(1) - keep, to_l = max_share(lfm, ir) * keep;
        const R so = sigmoid(orr), tz = tanh_(zr);
        const R g_y = gy[k];
        const R g_c = gc[k] + g_y * (so / n1[k]);
        const R g_n = gn[k] + g_y * (-y1[k] / n1[k]);
        const R g_a = (g_n + g_c * tz) * (e_i * min1_share(e_i));
        const R g_b = (g_c * c0[k] + g_n * n0[k]) * (e_f * min1_share(e_f));
        const R g_m = gm[k] - g_a - g_b;
        const R g_l = g_b + g_m * to_l;
        graw[k] = g_a + g_m * to_i;
        graw[dh + k] = g_l * sigmoid(-fr);
        graw[2 * dh + k] = g_c * (min1(e_i) * (R(1) - tz * tz));
        graw[3 * dh + k] = g_y * (c1[k] / n1[k] * so * (R(1) - so));
        const R fg = min1(e_f);
        gc[k] = g_c * fg;
        gn[k] = g_n * fg;
        gm[k] = g_l;
    }
}

// out (dh) = Σ_g w[g] rows[g] over a head's 4 dh gates: four partial sums (g ≡ 0, 1, 2, 3 mod 4), each in the order
// of g, then (p0 + p1) + (p2 + p3), so that four chains of additions run side by side; p: scratch (4 dh).
template <typename R>
PRIMACY_INLINE void gates_times_rows(int64_t dh, const R* __restrict__ w, const R* __restrict__ rows, R* __restrict__ p,
                                     R* __restrict__ out) {
    for (int64_t j = 0; j < 4 * dh; ++j) p[j] = R(0);
    for (int64_t g = 0; g < 4 * dh; g += 4) {
        for (int64_t q = 0; q < 4; ++q) {
            const R wq = w[g + q];
            const R* row = rows + (g + q) * dh;
            R* pq = p + q * dh;
            for (int64_t j = 0; j < dh; ++j) pq[j] += wq * row[j];
        }
    }
    for (int64_t j = 0; j < dh; ++j) out[j] = (p[j] + p[dh + j]) + (p[2 * dh + j] + p[3 * dh + j]);
}

// out (dh) = Σ_{g < G} w[g] rows[g] (rows: G × dh): four partial sums (g ≡ 0, 1, 2, 3 mod 4), each in the order of
// g, then (p0 + p1) + (p2 + p3), G a multiple of 4. DH: dh as a constant (0: as given), so that the partial sums live
// in registers (with a scratch array GCC's code for a constant 16 took 3 times as long, for a variable dh as long)
template <typename R, int64_t DH>
PRIMACY_INLINE void rows_product(int64_t dh_given, int64_t G, const R* __restrict__ w, const R* __restrict__ rows,
                                 R* __restrict__ out) {
    constexpr int64_t N = DH ? DH : 64;
    const int64_t dh = DH ? DH : dh_given;
    if (DH == 0 && (dh > N || G % 4)) {  // a width beyond the arrays or gates not in fours: one sum, in order of g
        for (int64_t j = 0; j < dh; ++j) out[j] = R(0);
        for (int64_t g = 0; g < G; ++g)
            for (int64_t j = 0; j < dh; ++j) out[j] += w[g] * rows[g * dh + j];
        return;
    }
    R p0[N], p1[N], p2[N], p3[N];
    for (int64_t j = 0; j < dh; ++j) p0[j] = p1[j] = p2[j] = p3[j] = R(0);
#pragma GCC unroll 1
    for (int64_t g = 0; g < G; g += 4) {
        const R w0 = w[g], w1 = w[g + 1], w2 = w[g + 2], w3 = w[g + 3];
        const R *r0 = rows + g * dh, *r1 = r0 + dh, *r2 = r1 + dh, *r3 = r2 + dh;
        for (int64_t j = 0; j < dh; ++j) {
            p0[j] += w0 * r0[j];
            p1[j] += w1 * r1[j];
            p2[j] += w2 * r2[j];
            p3[j] += w3 * r3[j];
        }
    }
    for (int64_t j = 0; j < dh; ++j) out[j] = (p0[j] + p1[j]) + (p2[j] + p3[j]);
}

template <typename R>
PRIMACY_INLINE void backward(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                            int64_t first_from_zero, const R* raws, const R* states, const R* r, const R* gy_out,
                            const R* g_all, R* graws, R* gstates) {
    const int64_t H = NH * dh, S = (T + 1) * B * H;
    // per batch element, the gradients into y, c, n, m after the step (4 H); then y's before it, and p (4 dh)
    std::vector<R> carries((last - first) * 4 * H + H + 4 * dh);
    R *gy0 = carries.data() + (last - first) * 4 * H, *p = gy0 + H;
    for (int64_t b = first; b < last; ++b) {
        R* carry = carries.data() + (b - first) * 4 * H;
        for (int64_t s = 0; s < 4; ++s) {  // from outside, into the states after the last step
            const R* from = g_all ? g_all + s * S + (T * B + b) * H
                                  : (s == 0 ? gy_out + ((T - 1) * B + b) * H : nullptr);
            for (int64_t u = 0; u < H; ++u) carry[s * H + u] = from ? from[u] : R(0);
        }
    }
    for (int64_t t = T - 1; t >= 0; --t) {  // the batch elements innermost, as in forward
        for (int64_t b = first; b < last; ++b) {
            R* carry = carries.data() + (b - first) * 4 * H;
            R *gy = carry, *gc = gy + H, *gn = gc + H, *gm = gn + H;
            const R* before = states + (t * B + b) * H;
            const R* after = states + ((t + 1) * B + b) * H;
            const R* raw = raws + (t * B + b) * 4 * H;
            R* graw = graws + (t * B + b) * 4 * H;
            const bool from_zero = t == 0 && first_from_zero;
            for (int64_t h = 0; h < NH; ++h) {
                const int64_t u = h * dh;
                pointwise_backward(dh, from_zero, raw + h * 4 * dh, before + S + u, before + 2 * S + u,
                                   before + 3 * S + u, after + u, after + S + u, after + 2 * S + u, after + 3 * S + u,
                                   gy + u, gc + u, gn + u, gm + u, graw + h * 4 * dh);
            }
            // y's gradient before the step: graw R (a head's gates times its rows of r), then + from outside
            // rows_product adds as gates_times_rows does (the same bits) with its partial sums in registers
            for (int64_t h = 0; h < NH; ++h) {
                if (dh <= 64)
                    rows_product<R, 0>(dh, 4 * dh, graw + h * 4 * dh, r + h * 4 * dh * dh, gy0 + h * dh);
                else
                    gates_times_rows(dh, graw + h * 4 * dh, r + h * 4 * dh * dh, p, gy0 + h * dh);
            }
            const R* y_in = g_all ? g_all + (t * B + b) * H : (t > 0 ? gy_out + ((t - 1) * B + b) * H : nullptr);
            for (int64_t u = 0; u < H; ++u) gy[u] = y_in ? y_in[u] + gy0[u] : gy0[u];
            if (g_all) {
                for (int64_t s = 1; s < 4; ++s) {
                    const R* from = g_all + s * S + (t * B + b) * H;
                    for (int64_t u = 0; u < H; ++u) carry[s * H + u] += from[u];
                }
            }
        }
    }
    for (int64_t b = first; b < last; ++b)
        for (int64_t s = 0; s < 4; ++s)
            std::memcpy(gstates + (s * B + b) * H, carries.data() + ((b - first) * 4 + s) * H, sizeof(R) * H);
}

// The forward loops for a head width of 8, 16 or 32 (the atlas's xLSTM: 64 / 4 heads = 16) compiled with that width
// as a constant, any other width's with it as a variable: the same operations in the same order either way, so the
// same bits; with a constant the compiler drops the loops' remainders and checks (forward 20 -> 16 ms at T 256, B 64,
// 4 heads of 16). The backward keeps the variable: with a constant 16 GCC unrolled its loops into slower code.
template <typename R>
PRIMACY_INLINE void forward_any(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                int64_t first_from_zero, const R* xb, const R* rt, R* raws, R* states) {
    switch (dh) {
        case 8: return forward<R, 8>(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
        case 16: return forward<R, 16>(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
        case 32: return forward<R, 32>(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
        default: return forward<R, 0>(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
    }
}


// One head's pre-activations (4 dh) from its inputs: the bias, then the sum of wt's rows for gates i and f over the
// head's units of x_conv (xc, dh) and for z and o over those of x (xr, dh), each in the order of j.
template <typename R>
PRIMACY_INLINE void input_gates(int64_t dh, const R* __restrict__ wt, const R* __restrict__ bias,
                                const R* __restrict__ xc, const R* __restrict__ xr, R* __restrict__ raw) {
    for (int64_t g = 0; g < 4 * dh; ++g) raw[g] = bias[g];
    for (int64_t j = 0; j < dh; ++j) {
        const R xj = xc[j];
        const R* row = wt + j * 4 * dh;
        for (int64_t g = 0; g < 2 * dh; ++g) raw[g] += row[g] * xj;
    }
    for (int64_t j = 0; j < dh; ++j) {
        const R xj = xr[j];
        const R* row = wt + j * 4 * dh;
        for (int64_t g = 2 * dh; g < 4 * dh; ++g) raw[g] += row[g] * xj;
    }
}

// forward with the pre-activations formed here from rows (input_gates), not given: the states from zero
template <typename R, int64_t DH>
PRIMACY_INLINE void forward_gates(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh_given,
                                  const R* rows, const R* wt, const R* bias, const R* rt, R* raws, R* states) {
    const int64_t dh = DH ? DH : dh_given;
    const int64_t H = NH * dh, S = (T + 1) * B * H;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = first; b < last; ++b) {
            const R* before = states + (t * B + b) * H;
            R* after = states + ((t + 1) * B + b) * H;
            R* raw = raws + (t * B + b) * 4 * H;
            const R* row = rows + (t * B + b) * 2 * H;
            for (int64_t h = 0; h < NH; ++h) {
                R* rh = raw + h * 4 * dh;
                const int64_t u = h * dh;
                input_gates(dh, wt + h * dh * 4 * dh, bias + h * 4 * dh, row + u, row + H + u, rh);
                recurrent_input(dh, rt + h * dh * 4 * dh, before + u, rh);
                pointwise(dh, t == 0, rh, before + S + u, before + 2 * S + u, before + 3 * S + u, after + u,
                          after + S + u, after + 2 * S + u, after + 3 * S + u);
            }
        }
    }
}

template <typename R>
PRIMACY_INLINE void forward_gates_any(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                      const R* rows, const R* wt, const R* bias, const R* rt, R* raws, R* states) {
    switch (dh) {
        case 8: return forward_gates<R, 8>(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
        case 16: return forward_gates<R, 16>(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
        case 32: return forward_gates<R, 32>(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
        default: return forward_gates<R, 0>(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
    }
}

// backward of forward_gates from the gradient of y after each step alone (gy_out, T B H): graws as backward's, and
// grows, the gradient of rows (graw's gates i, f times their rows of w into x_conv, z, o's into x)
template <typename R, int64_t DH>
PRIMACY_INLINE void backward_gates(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh_given,
                                   const R* raws, const R* states, const R* r, const R* w, const R* gy_out, R* graws,
                                   R* grows) {
    const int64_t dh = DH ? DH : dh_given;
    const int64_t H = NH * dh, S = (T + 1) * B * H;
    std::vector<R> carries((last - first) * 4 * H + H);
    R* gy0 = carries.data() + (last - first) * 4 * H;
    for (int64_t b = first; b < last; ++b) {
        R* carry = carries.data() + (b - first) * 4 * H;
        for (int64_t u = 0; u < H; ++u) carry[u] = gy_out[((T - 1) * B + b) * H + u];
        for (int64_t u = H; u < 4 * H; ++u) carry[u] = R(0);
    }
    for (int64_t t = T - 1; t >= 0; --t) {
        for (int64_t b = first; b < last; ++b) {
            R* carry = carries.data() + (b - first) * 4 * H;
            R *gy = carry, *gc = gy + H, *gn = gc + H, *gm = gn + H;
            const R* before = states + (t * B + b) * H;
            const R* after = states + ((t + 1) * B + b) * H;
            const R* raw = raws + (t * B + b) * 4 * H;
            R* graw = graws + (t * B + b) * 4 * H;
            R* grow = grows + (t * B + b) * 2 * H;
            for (int64_t h = 0; h < NH; ++h) {
                const int64_t u = h * dh;
                pointwise_backward(dh, t == 0, raw + h * 4 * dh, before + S + u, before + 2 * S + u,
                                   before + 3 * S + u, after + u, after + S + u, after + 2 * S + u, after + 3 * S + u,
                                   gy + u, gc + u, gn + u, gm + u, graw + h * 4 * dh);
            }
            for (int64_t h = 0; h < NH; ++h) {
                const R* gh = graw + h * 4 * dh;
                const R* wh = w + h * 4 * dh * dh;
                rows_product<R, DH>(dh, 4 * dh, gh, r + h * 4 * dh * dh, gy0 + h * dh);
                rows_product<R, DH>(dh, 2 * dh, gh, wh, grow + h * dh);
                rows_product<R, DH>(dh, 2 * dh, gh + 2 * dh, wh + 2 * dh * dh, grow + H + h * dh);
            }
            for (int64_t u = 0; u < H; ++u) gy[u] = t > 0 ? gy_out[((t - 1) * B + b) * H + u] + gy0[u] : gy0[u];
        }
    }
}

template <typename R>
PRIMACY_INLINE void backward_gates_any(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                       const R* raws, const R* states, const R* r, const R* w, const R* gy_out,
                                       R* graws, R* grows) {
    switch (dh) {
        case 8: return backward_gates<R, 8>(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
        case 16: return backward_gates<R, 16>(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
        case 32: return backward_gates<R, 32>(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
        default: return backward_gates<R, 0>(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
    }
}

}  // namespace

extern "C" {

int primacy_slstm_abi() { return 2; }

PRIMACY_AVX512 void primacy_slstm_forward_f32(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                              int64_t first_from_zero, const float* xb, const float* rt, float* raws,
                                              float* states) {
    forward_any(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
}
PRIMACY_AVX512 void primacy_slstm_forward_f64(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                              int64_t first_from_zero, const double* xb, const double* rt,
                                              double* raws, double* states) {
    forward_any(first, last, T, B, NH, dh, first_from_zero, xb, rt, raws, states);
}
PRIMACY_AVX512 void primacy_slstm_backward_f32(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                               int64_t dh, int64_t first_from_zero, const float* raws,
                                               const float* states, const float* r, const float* gy_out,
                                               const float* g_all, float* graws, float* gstates) {
    backward(first, last, T, B, NH, dh, first_from_zero, raws, states, r, gy_out, g_all, graws, gstates);
}
PRIMACY_AVX512 void primacy_slstm_backward_f64(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                               int64_t dh, int64_t first_from_zero, const double* raws,
                                               const double* states, const double* r, const double* gy_out,
                                               const double* g_all, double* graws, double* gstates) {
    backward(first, last, T, B, NH, dh, first_from_zero, raws, states, r, gy_out, g_all, graws, gstates);
}

PRIMACY_AVX512 void primacy_slstm_gates_forward_f32(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                                    int64_t dh, const float* rows, const float* wt, const float* bias,
                                                    const float* rt, float* raws, float* states) {
    forward_gates_any(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
}
PRIMACY_AVX512 void primacy_slstm_gates_forward_f64(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                                    int64_t dh, const double* rows, const double* wt,
                                                    const double* bias, const double* rt, double* raws,
                                                    double* states) {
    forward_gates_any(first, last, T, B, NH, dh, rows, wt, bias, rt, raws, states);
}
PRIMACY_AVX512 void primacy_slstm_gates_backward_f32(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                                     int64_t dh, const float* raws, const float* states,
                                                     const float* r, const float* w, const float* gy_out,
                                                     float* graws, float* grows) {
    backward_gates_any(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
}
PRIMACY_AVX512 void primacy_slstm_gates_backward_f64(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,
                                                     int64_t dh, const double* raws, const double* states,
                                                     const double* r, const double* w, const double* gy_out,
                                                     double* graws, double* grows) {
    backward_gates_any(first, last, T, B, NH, dh, raws, states, r, w, gy_out, graws, grows);
}

}  // extern "C"
