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

#ifndef PRIMACY_FMA_PASS  // the file itself; the compiled_fma section below is included once per instruction set
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// fast_exp, log1p_unit and sigmoid (scalar and on 8 floats, F8), PRIMACY_CLONES and PRIMACY_INLINE: primacy's
// shared header (primacy/native/fast_math.h, on the include path NativeLibrary gives the compiler).
#include "fast_math.h"

namespace {

using primacy::F8;
// 16 floats: the blocks of the compiled_fma kernels (one AVX-512 vector, two AVX2 ones; each lane rounds as a float)
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
using primacy::fast_exp;
using primacy::log1p_unit;
using primacy::sigmoid;

// The mixer's elementwise maps around the scan (mixer_forward, mixer_backward), as torch computes them: softplus(x) =
// log(1 + e^x), x itself above 20 (torch's threshold), its derivative e^x / (e^x + 1) (1 above 20), σ(x) for SiLU.
// float32: from fast_exp and log1p_unit (log(1 + e^-|x|)); float64: the C library's, so that it equals torch to
// rounding. The F8 forms are the same operations in the same order on 8 floats, so each lane has the scalar's bits.
PRIMACY_INLINE float softplus(float x) {
    const float soft = (x > 0.0f ? x : 0.0f) + log1p_unit(fast_exp(x < 0.0f ? x : -x));
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
PRIMACY_INLINE F8 softplus(F8 x) {
    const F8 zero{};
    const F8 soft = (x > zero ? x : zero) + log1p_unit(fast_exp(x < zero ? x : -x));
    return x > zero + 20.0f ? x : soft;
}
PRIMACY_INLINE F8 softplus_grad(F8 x) {
    const F8 e = fast_exp(x);
    return x > 20.0f ? F8{} + 1.0f : e / (e + 1.0f);
}

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

// One position's rows of E channels: Δ = softplus(x + bias) (forward), and the gate silu(z), its derivative and
// softplus's (backward). Each channel's maps are a function of X, R or F8; the rows take float channels 8 at a time
// and the rest one by one (double ones one by one), each with the bits of the scalar maps.
template <typename X, typename R>
PRIMACY_INLINE X load(const R* p) {
    X x;
    std::memcpy(&x, p, sizeof x);
    return x;
}
template <typename X, typename R>
PRIMACY_INLINE void store(R* p, X x) {
    std::memcpy(p, &x, sizeof x);
}
template <typename X, typename R>
PRIMACY_INLINE void step_at(const R* x, const R* bias, R* steps) {
    store(steps, softplus(load<X>(x) + load<X>(bias)));
}
template <typename X, typename R>
PRIMACY_INLINE void gate_at(const R* z, R* gates) {
    const X v = load<X>(z);
    store(gates, v * sigmoid(v));
}
template <typename X, typename R>
PRIMACY_INLINE void gradients_at(const R* x, const R* bias, const R* z, R* gates, R* gate_grads, R* step_grads) {
    const X v = load<X>(z);
    const X sig = sigmoid(v);
    store(gates, v * sig);
    store(gate_grads, sig * (R(1) + v * (R(1) - sig)));  // torch's silu backward
    store(step_grads, softplus_grad(load<X>(x) + load<X>(bias)));
}
// The first channel the rows take one by one: float ones past the last multiple of 8, double ones all.
template <typename R>
PRIMACY_INLINE int64_t one_by_one(int64_t E) {
    return sizeof(R) == sizeof(float) ? E - E % 8 : 0;
}
template <typename R>
PRIMACY_INLINE void step_row(int64_t E, const R* __restrict__ x, const R* __restrict__ bias, R* __restrict__ steps) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8) step_at<F8>(x + e, bias + e, steps + e);
    for (int64_t e = rest; e < E; ++e) step_at<R>(x + e, bias + e, steps + e);
}
template <typename R>
PRIMACY_INLINE void gate_row(int64_t E, const R* __restrict__ z, R* __restrict__ gates) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8) gate_at<F8>(z + e, gates + e);
    for (int64_t e = rest; e < E; ++e) gate_at<R>(z + e, gates + e);
}
template <typename R>
PRIMACY_INLINE void gradient_rows(int64_t E, const R* __restrict__ x, const R* __restrict__ bias,
                                  const R* __restrict__ z, R* __restrict__ gates, R* __restrict__ gate_grads,
                                  R* __restrict__ step_grads) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8)
        gradients_at<F8>(x + e, bias + e, z + e, gates + e, gate_grads + e, step_grads + e);
    for (int64_t e = rest; e < E; ++e)
        gradients_at<R>(x + e, bias + e, z + e, gates + e, gate_grads + e, step_grads + e);
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
                                  const R* z, int64_t zb, int64_t zr, R* out, R* dt_sums, R* scratch) {
    R* __restrict__ h = scratch;
    R* __restrict__ steps = h + N * E;
    R* __restrict__ gates = steps + E;
    R* __restrict__ injected = gates + E;
    R* __restrict__ y = injected + E;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * zb;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R* outi = out + i * T * E;
        R* __restrict__ sums = dt_sums + i * E;
        std::memset(h, 0, sizeof(R) * N * E);  // h_{-1}
        std::memset(sums, 0, sizeof(R) * E);
        for (int64_t t = 0; t < T; ++t) {
            const R* __restrict__ ut = ui + t * E;
            step_row(E, xi + t * E, bias, steps);
            gate_row(E, zi + t * zr, gates);
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
PRIMACY_INLINE void first_rows(int64_t E, const R* __restrict__ st, const R* __restrict__ ut, const R* __restrict__ d,
                               R* __restrict__ injected, R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        injected[e] = st[e] * ut[e];
        y[e] = d[e] * ut[e];
    }
}

template <typename R>
PRIMACY_INLINE void start_rows(int64_t E, const R* __restrict__ ut, const R* __restrict__ st,
                               const R* __restrict__ got, const R* __restrict__ yt, const R* __restrict__ gates,
                               const R* __restrict__ gate_grads, R* __restrict__ injected, R* __restrict__ gy,
                               R* __restrict__ gzt) {
    for (int64_t e = 0; e < E; ++e) {
        injected[e] = st[e] * ut[e];
        gy[e] = got[e] * gates[e];
        gzt[e] = got[e] * yt[e] * gate_grads[e];
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

// State index n at one position, as mixer_forward computes it, keeping exp(Δ A_n) and h_t: decay = exp(Δ A_n),
// h_t = decay ⊙ h_{t-1} + (Δ u) B_n, y += h_t C_n.
template <typename R>
PRIMACY_INLINE void state_forward(int64_t E, R bn, R cn, const R* __restrict__ an, const R* __restrict__ st,
                                  const R* __restrict__ injected, const R* __restrict__ hb, R* __restrict__ hn,
                                  R* __restrict__ decay, R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        decay[e] = fast_exp(st[e] * an[e]);
        hn[e] = decay[e] * hb[e] + injected[e] * bn;
        y[e] += hn[e] * cn;
    }
}

// The backward's blocks of channels: LANES values of R in one vector of GCC's and Clang's vector extensions (compiled
// to as many of the target's vectors as it takes, each lane rounding as scalar code does); the channels past the
// last whole block go through the same code one at a time, as R.
constexpr int64_t LANES = 8;
template <typename R>
struct Lanes {
    typedef R type __attribute__((vector_size(LANES * sizeof(R))));
    typedef R half __attribute__((vector_size(LANES / 2 * sizeof(R))));
};

// ∂L/∂B_t and ∂L/∂C_t are sums over channels, taken as dot() takes them, so that they round as they did when
// dot() computed them: four partial sums, the one of channel e at slot e % 4, in channel order (a block's first
// half, then its second), then the channels past the last multiple of 4, one by one after the partial sums are
// summed (kept at slots 4 to 6 until then). Each state index has 8 slots.
constexpr int64_t SLOTS = 8;
template <typename R>
PRIMACY_INLINE void add_products(R* slots, typename Lanes<R>::type x) {
    typedef typename Lanes<R>::half H;
    H low, high;
    std::memcpy(&low, &x, sizeof low);
    std::memcpy(&high, reinterpret_cast<const char*>(&x) + sizeof low, sizeof high);
    store(slots, (load<H>(slots) + low) + high);
}
template <typename R>
PRIMACY_INLINE void add_products(R* slots, R x) {  // one channel: slots points at its slot
    *slots += x;
}
template <typename R>
PRIMACY_INLINE R slot_sum(const R* slots, int64_t trailing) {
    R total = (slots[0] + slots[1]) + (slots[2] + slots[3]);
    for (int64_t k = 0; k < trailing; ++k) total += slots[4 + k];
    return total;
}

// One block of channels at one position, over every state index n: G = gy C_n + carry, ∂L/∂(Δ A_n) = G h_{t-1}
// exp(Δ A_n) from the kept h_{t-1} and exp(Δ A_n); adds to the element's ∂L/∂A_n, sets carry for t - 1, adds
// gy h_t and G Δ u to the slots of ∂L/∂C_n and ∂L/∂B_n, and writes Σ_n ∂L/∂(Δ A_n) A_n (glog) and ∂L/∂(Δ u)
// (inject). Arrays (N, E) are given at the block's first channel; slots (N, SLOTS) at the block's (or channel's).
template <typename X, typename R>
PRIMACY_INLINE void block_backward(int64_t N, int64_t E, const R* __restrict__ bt, const R* __restrict__ ct,
                                   const R* __restrict__ at, const R* __restrict__ decays,
                                   const R* __restrict__ before, const R* __restrict__ now, const R* __restrict__ st,
                                   const R* __restrict__ gy, const R* __restrict__ injected, R* __restrict__ carry,
                                   R* __restrict__ ga, R* __restrict__ gc_slots, R* __restrict__ gb_slots,
                                   R* __restrict__ inject, R* __restrict__ glog) {
    const X step = load<X>(st), out = load<X>(gy), in = load<X>(injected);
    X log_sum{}, inject_sum{};
    for (int64_t n = 0; n < N; ++n) {
        const int64_t at_n = n * E;
        const X decay = load<X>(decays + at_n);
        const X g = out * ct[n] + load<X>(carry + at_n);
        const X through_decay = g * load<X>(before + at_n) * decay;
        store(ga + at_n, load<X>(ga + at_n) + through_decay * step);
        log_sum += through_decay * load<X>(at + at_n);
        inject_sum += g * bt[n];
        store(carry + at_n, decay * g);
        add_products(gc_slots + n * SLOTS, out * load<X>(now + at_n));
        add_products(gb_slots + n * SLOTS, g * in);
    }
    store(inject, inject_sum);
    store(glog, log_sum);
}

// mixer_forward's gradients for [first, last): gu, gdtr, gz (B, T, E), gb, gc (B, T, N), and per batch element the
// partial sums of ∂L/∂A (transposed, (B, N, E)), ∂L/∂bias and ∂L/∂D ((B, E) each), summed by the caller in batch
// order. A first pass over time computes one element's Δ_t, exp(Δ_t A), h_t and y_t (before the gate) as
// mixer_forward does, and keeps them (reading exp(Δ A) back costs less than computing it again); the second walks
// back in time, over blocks of LANES channels, each block's rows in registers while it runs over the N state
// indices. Every result has the bits it had when this backward computed exp(Δ A) again and took the sums over
// channels with dot() (library ABI 3).
// Scratch ((2 T + 2) N E + 2 T E + 7 E + 2 N SLOTS): every h_t ((T + 1) N E), every exp(Δ_t A) (T N E), the
// carry exp(Δ_{t+1} A) ⊙ G_{t+1} (N E), every Δ_t and y_t (T E each), rows of one position, and the slots of
// ∂L/∂B_t and ∂L/∂C_t.
template <typename R>
PRIMACY_INLINE void mixer_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u,
                                   const R* dtr, const R* bias, const R* at, const R* b, const R* c, const R* d,
                                   const R* z, int64_t zb, int64_t zr, const R* gout, R* gu, R* gdtr, R* gb, R* gc,
                                   R* gz, R* ga_parts,
                                   R* gbias_parts, R* gd_parts, R* scratch) {
    typedef typename Lanes<R>::type V;
    R* __restrict__ states = scratch;  // h_{-1} = 0, h_0, ..., h_{T-1}, (N, E) each
    R* __restrict__ decays = states + (T + 1) * N * E;  // exp(Δ_t A), (N, E) each
    R* __restrict__ carry = decays + T * N * E;
    R* __restrict__ steps = carry + N * E;
    R* __restrict__ ys = steps + T * E;  // y_t before the gate
    R* __restrict__ gates = ys + T * E;
    R* __restrict__ gate_grads = gates + E;
    R* __restrict__ step_grads = gate_grads + E;
    R* __restrict__ injected = step_grads + E;
    R* __restrict__ gy = injected + E;  // ∂L/∂y_t before the gate
    R* __restrict__ inject = gy + E;  // ∂L/∂(Δ_t u_t)
    R* __restrict__ glog = inject + E;  // Σ_n ∂L/∂(Δ_t A_n) A_n
    R* __restrict__ gc_slots = glog + E;  // (N, SLOTS) each
    R* __restrict__ gb_slots = gc_slots + N * SLOTS;
    const int64_t whole = E - E % LANES;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * zb, *gi = gout + i * T * E;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R *gbi = gb + i * T * N, *gci = gc + i * T * N;
        R* __restrict__ gai = ga_parts + i * N * E;
        R* __restrict__ gbiasi = gbias_parts + i * E;
        R* __restrict__ gdi = gd_parts + i * E;
        std::memset(states, 0, sizeof(R) * N * E);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {  // Δ_t, exp(Δ_t A), h_t and y_t of every t, as mixer_forward computes them
            const R* __restrict__ ut = ui + t * E;
            R* __restrict__ st = steps + t * E;
            R* __restrict__ yt = ys + t * E;
            step_row(E, xi + t * E, bias, st);
            first_rows(E, st, ut, d, injected, yt);
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n], cn = ci[t * N + n];
                const R* __restrict__ an = at + n * E;
                const R* __restrict__ hb = states + (t * N + n) * E;
                R* __restrict__ hn = states + ((t + 1) * N + n) * E;
                state_forward(E, bn, cn, an, st, injected, hb, hn, decays + (t * N + n) * E, yt);
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
            const R* bt = bi + t * N;
            const R* ct = ci + t * N;
            const R* before = states + t * N * E;  // h_{t-1}
            const R* now = before + N * E;  // h_t
            const R* dec = decays + t * N * E;
            gradient_rows(E, xi + t * E, bias, zi + t * zr, gates, gate_grads, step_grads);
            start_rows(E, ut, st, got, ys + t * E, gates, gate_grads, injected, gy, gz + (i * T + t) * E);
            std::memset(gc_slots, 0, sizeof(R) * 2 * N * SLOTS);
            for (int64_t e = 0; e < whole; e += LANES)
                block_backward<V>(N, E, bt, ct, at + e, dec + e, before + e, now + e, st + e, gy + e, injected + e,
                                  carry + e, gai + e, gc_slots, gb_slots, inject + e, glog + e);
            for (int64_t e = whole; e < E; ++e) {
                const int64_t slot = e < E - E % 4 ? e % 4 : 4 + e % 4;  // a partial sum's, or a trailing channel's
                block_backward<R>(N, E, bt, ct, at + e, dec + e, before + e, now + e, st + e, gy + e, injected + e,
                                  carry + e, gai + e, gc_slots + slot, gb_slots + slot, inject + e, glog + e);
            }
            for (int64_t n = 0; n < N; ++n) {
                gci[t * N + n] = slot_sum(gc_slots + n * SLOTS, E % 4);
                gbi[t * N + n] = slot_sum(gb_slots + n * SLOTS, E % 4);
            }
            input_gradients(E, st, ut, d, gy, inject, glog, step_grads, gu + (i * T + t) * E,
                            gdtr + (i * T + t) * E, gbiasi, gdi);
        }
    }
}

// Σ_i parts_i over count arrays of size values each, in order i = 0, 1, ...: the batch-ordered sums of per-element
// partials (as ``total = parts[0].clone(); total += parts[i]`` in torch, with the same bits), in one call.
template <typename R>
PRIMACY_INLINE void add_into(int64_t size, const R* __restrict__ part, R* __restrict__ total) {
    for (int64_t k = 0; k < size; ++k) total[k] += part[k];
}
template <typename R>
PRIMACY_INLINE void batch_sum(int64_t count, int64_t size, const R* parts, R* total) {
    std::memcpy(total, parts, sizeof(R) * size);
    for (int64_t i = 1; i < count; ++i) add_into(size, parts + i * size, total);
}

}  // namespace

// scan='compiled_fma''s section (and the convolution's templates, which compiled_conv shares), compiled once per
// instruction set: for AVX-512 and for AVX2 with FMA (GCC on x86-64: this file includes itself under each target, in
// namespaces avx512 and avx2) and for any CPU (namespace portable). The entry points call the first the CPU runs.
// Every one computes the same operations in the same order with the same roundings (fused multiply-adds included: the
// portable build takes them from the C library where the CPU has none), so they give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PRIMACY_FMA_TARGETS 1
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define PRIMACY_FMA_PASS avx512
#define PRIMACY_FMA_LEVEL 2  // (GCC's target pragma does not define __AVX512F__ and the like in C++)
#include __FILE__
#undef PRIMACY_FMA_PASS
#undef PRIMACY_FMA_LEVEL
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define PRIMACY_FMA_PASS avx2
#define PRIMACY_FMA_LEVEL 1
#include __FILE__
#undef PRIMACY_FMA_PASS
#undef PRIMACY_FMA_LEVEL
#pragma GCC pop_options
#endif
#define PRIMACY_FMA_PASS portable
#define PRIMACY_FMA_LEVEL 0
#include __FILE__
#undef PRIMACY_FMA_PASS
#undef PRIMACY_FMA_LEVEL

namespace {
// Which build of the compiled_fma section this CPU runs: 2 AVX-512, 1 AVX2 with FMA, 0 the portable one; tests may
// ask for a lower one (primacy_fma_use_level).
int cpu_fma_level() {
#if defined(PRIMACY_FMA_TARGETS)
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return fma && __builtin_cpu_supports("avx512f") ? 2 : (fma ? 1 : 0);
#else
    return 0;
#endif
}
int fma_level_used = cpu_fma_level();
int fma_level() { return fma_level_used; }
}  // namespace

extern "C" {

int primacy_scan_abi() { return 7; }

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
                                                       const R* b, const R* c, const R* d, const R* z, int64_t zb,   \
                                                       int64_t zr, R* out, R* dt_sums, R* scratch) {                 \
        mixer_forward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, zb, zr, out, dt_sums, scratch);           \
    }                                                                                                                 \
    PRIMACY_CLONES void primacy_mixer_backward_##SUFFIX(                                                              \
        int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dtr, const R* bias,       \
        const R* at, const R* b, const R* c, const R* d, const R* z, int64_t zb, int64_t zr, const R* gout, R* gu,   \
        R* gdtr, R* gb, R* gc, R* gz, R* ga_parts, R* gbias_parts, R* gd_parts, R* scratch) {                        \
        mixer_backward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, zb, zr, gout, gu, gdtr, gb, gc, gz,       \
                       ga_parts, gbias_parts, gd_parts, scratch);                                                    \
    }

PRIMACY_MIXER_ENTRIES(float, f32)
PRIMACY_MIXER_ENTRIES(double, f64)

#define PRIMACY_CONV_ENTRIES(R, SUFFIX)                                                                               \
    PRIMACY_CLONES void primacy_conv_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K,  \
                                                      const R* x, int64_t xb, int64_t xr, const R* w, const R* bias, \
                                                      R* out) {                                                      \
        portable::conv_forward<false, F8>(first, last, T, E, K, x, xb, xr, w, bias, out);                                      \
    }                                                                                                                 \
    PRIMACY_CLONES void primacy_conv_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, \
                                                       const R* x, int64_t xb, int64_t xr, const R* w,               \
                                                       const R* bias, const R* gout, R* gx, R* gw_parts,             \
                                                       R* gbias_parts, R* scratch) {                                 \
        portable::conv_backward<false, F8>(first, last, T, E, K, x, xb, xr, w, bias, gout, gx, T * E, E, gw_parts,            \
                                 gbias_parts, scratch);                                                               \
    }

PRIMACY_CONV_ENTRIES(float, f32)
PRIMACY_CONV_ENTRIES(double, f64)

// scan='compiled_fma': primacy_fma_native() says whether this CPU fuses multiply-adds in hardware, which is when
// scan='auto' takes it (elsewhere the portable build computes the same bits with the C library's fma, slowly).
int primacy_fma_native() {
#if defined(PRIMACY_FMA_TARGETS)
    return cpu_fma_level() > 0;
#elif defined(__aarch64__) || defined(__FMA__)
    return 1;
#else
    return 0;
#endif
}

// For tests: run the build of a level at most this CPU's (one that is not is refused: -1), and say which it runs.
int primacy_fma_use_level(int level) {
    if (level > cpu_fma_level()) return -1;
    fma_level_used = level < 0 ? cpu_fma_level() : level;
    return fma_level_used;
}

#if defined(PRIMACY_FMA_TARGETS)
#define PRIMACY_FMA_CALL(call)        \
    switch (fma_level()) {            \
        case 2: avx512::call; return; \
        case 1: avx2::call; return;   \
        default: portable::call;      \
    }
#else
#define PRIMACY_FMA_CALL(call) portable::call;
#endif

#define PRIMACY_FMA_ENTRIES(R, SUFFIX)                                                                                \
    void primacy_fma_conv_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x, \
                                           int64_t xb, int64_t xr, const R* w, const R* bias, R* out) {              \
        PRIMACY_FMA_CALL(conv_forward_fused(first, last, T, E, K, x, xb, xr, w, bias, out))                          \
    }                                                                                                                 \
    void primacy_fma_conv_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,\
                                            int64_t xb, int64_t xr, const R* w, const R* bias, const R* gout, R* gx, \
                                            int64_t gxb, int64_t gxr, R* gw_parts, R* gbias_parts, R* scratch) {     \
        PRIMACY_FMA_CALL(conv_backward_fused(first, last, T, E, K, x, xb, xr, w, bias, gout, gx, gxb, gxr, gw_parts,  \
                                             gbias_parts, scratch))                                                   \
    }                                                                                                                 \
    void primacy_fma_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, int64_t Rk,      \
                                      const R* u, const R* xdbl, const R* wt, const R* bias, const R* at, const R* d, \
                                      const R* z, int64_t zb, int64_t zr, R* out, R* dt_sums, R* scratch) {           \
        PRIMACY_FMA_CALL(fma_forward(first, last, T, E, N, Rk, u, xdbl, wt, bias, at, d, z, zb, zr, out, dt_sums,     \
                                     scratch))                                                                        \
    }                                                                                                                 \
    void primacy_fma_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, int64_t Rk,     \
                                       const R* u, const R* xdbl, const R* wt, const R* bias, const R* at,            \
                                       const R* d, const R* z, int64_t zb, int64_t zr, const R* gout, R* gu,          \
                                       R* gxdbl, R* gz, int64_t gzb, int64_t gzr, R* ga_parts, R* gbias_parts,        \
                                       R* gd_parts, R* gw_parts, R* scratch) {                                        \
        PRIMACY_FMA_CALL(fma_backward(first, last, T, E, N, Rk, u, xdbl, wt, bias, at, d, z, zb, zr, gout, gu, gxdbl, \
                                      gz, gzb, gzr, ga_parts, gbias_parts, gd_parts, gw_parts, scratch))              \
    }

PRIMACY_FMA_ENTRIES(float, f32)
#define PRIMACY_RMS_ENTRIES(R, SUFFIX)                                                                                \
    void primacy_fma_rms_forward_##SUFFIX(int64_t first, int64_t last, int64_t D, const R* x, const R* w, R eps,      \
                                          R* y, R* rs) {                                                              \
        PRIMACY_FMA_CALL(rms_forward(first, last, D, x, w, eps, y, rs))                                               \
    }                                                                                                                 \
    void primacy_fma_rms_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t D, const R* x, const R* w, \
                                           const R* rs, const R* gy, R* gx, R* gw_parts) {                            \
        PRIMACY_FMA_CALL(rms_backward(first, last, T, D, x, w, rs, gy, gx, gw_parts))                                 \
    }
PRIMACY_RMS_ENTRIES(float, f32)
PRIMACY_RMS_ENTRIES(double, f64)
PRIMACY_FMA_ENTRIES(double, f64)

PRIMACY_CLONES void primacy_batch_sum_f32(int64_t count, int64_t size, const float* parts, float* total) {
    batch_sum(count, size, parts, total);
}
PRIMACY_CLONES void primacy_batch_sum_f64(int64_t count, int64_t size, const double* parts, double* total) {
    batch_sum(count, size, parts, total);
}

}  // extern "C"

#else  // PRIMACY_FMA_PASS: this file included by itself, for one instruction set
namespace {
namespace PRIMACY_FMA_PASS {
// Arithmetic of two kinds: Fused = false multiplies, then adds (every build rounds alike: -ffp-contract=off), as
// scan='compiled_conv' and the older scans compute; Fused = true (scan='compiled_fma') rounds a * b + c once, by the
// C library's fma where the CPU has no instruction for it (the same bits, slowly). F16: 16 floats, the blocks of the
// compiled_fma kernels (one AVX-512 vector, two AVX2 ones; each lane rounds as a float).

PRIMACY_INLINE float fused(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
PRIMACY_INLINE double fused(double a, double b, double c) { return __builtin_fma(a, b, c); }
PRIMACY_INLINE F16 fused(F16 a, F16 b, F16 c) {
#if PRIMACY_FMA_LEVEL == 2
    return (F16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif PRIMACY_FMA_LEVEL == 1
    __m256 x[2], y[2], z[2];
    std::memcpy(x, &a, sizeof x);
    std::memcpy(y, &b, sizeof y);
    std::memcpy(z, &c, sizeof z);
    for (int k = 0; k < 2; ++k) z[k] = _mm256_fmadd_ps(x[k], y[k], z[k]);
    F16 r;
    std::memcpy(&r, z, sizeof r);
    return r;
#else
    F16 r;
    for (int k = 0; k < 16; ++k) r[k] = __builtin_fmaf(a[k], b[k], c[k]);
    return r;
#endif
}
PRIMACY_INLINE F8 fused(F8 a, F8 b, F8 c) {  // the Fused instantiation of F8 blocks is not called; for completeness
    F8 r;
    for (int k = 0; k < 8; ++k) r[k] = __builtin_fmaf(a[k], b[k], c[k]);
    return r;
}
template <bool Fused, typename X>
PRIMACY_INLINE X madd(X a, X b, X c) {
    if constexpr (Fused)
        return fused(a, b, c);
    else
        return a * b + c;
}
template <typename X, typename R>
PRIMACY_INLINE X splat(R value) {  // value in every lane (-0 as +0)
    return X{} + value;
}

PRIMACY_INLINE int32_t to_int(float k) { return static_cast<int32_t>(k); }
PRIMACY_INLINE I16 to_int(F16 k) { return __builtin_convertvector(k, I16); }

// fast_exp's steps (primacy/native/fast_math.h) with each multiply-add fused: exp(x) = 2^k p(r), k = round(x / ln 2),
// r = x - k ln 2 (ln 2 in two parts), p the degree-6 Taylor polynomial; x clamped to [-87, 88]. float64: the C
// library's exp.
// The clamp and 2^k p, the same numbers by the quickest instructions this build has: max and min are the comparisons
// and selections written out, and AVX-512's scalef multiplies by 2^k as the product with 2^k's bits does (rounded
// once, subnormal results too).
template <typename X>
PRIMACY_INLINE X clamp_exp(X x) {
    const X zero{};
#if PRIMACY_FMA_LEVEL == 2
    if constexpr (std::is_same_v<X, F16>)
        return (F16)_mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), (__m512)x));
#endif
    return x < zero - 87.0f ? zero - 87.0f : (x > zero + 88.0f ? zero + 88.0f : x);
}
template <typename X>
PRIMACY_INLINE X times_two_to(X p, X k) {
#if PRIMACY_FMA_LEVEL == 2
    if constexpr (std::is_same_v<X, F16>) return (F16)_mm512_scalef_ps((__m512)p, (__m512)k);
#endif
    const auto bits = (to_int(k) + 127) << 23;
    X scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
template <typename X>
PRIMACY_INLINE X exp_fused(X x) {
    const X zero{};
    x = clamp_exp(x);
    const X k = fused(x, zero + 1.44269504088896341f, zero + 12582912.0f) - 12582912.0f;  // round to nearest
    X r = fused(k, zero - 0.693145751953125f, x);
    r = fused(k, zero - 1.428606765330187045e-06f, r);
    X p = zero + 1.0f / 720;
    p = fused(p, r, zero + 1.0f / 120);
    p = fused(p, r, zero + 1.0f / 24);
    p = fused(p, r, zero + 1.0f / 6);
    p = fused(p, r, zero + 0.5f);
    p = fused(p, r, zero + 1.0f);
    p = fused(p, r, zero + 1.0f);
    return times_two_to(p, k);
}
PRIMACY_INLINE double exp_fused(double x) { return std::exp(x); }
template <bool Fused, typename X>
PRIMACY_INLINE X exp_of(X x) {
    if constexpr (Fused)
        return exp_fused(x);
    else
        return fast_exp(x);
}
template <bool Fused, typename X>
PRIMACY_INLINE X sigmoid_of(X x) {
    if constexpr (Fused)
        return 1.0f / (1.0f + exp_fused(-x));
    else
        return sigmoid(x);
}
// torch's silu backward, σ (1 + x (1 - σ)), and Fused's σ fma(x, 1 - σ, 1)
template <bool Fused, typename X>
PRIMACY_INLINE X silu_grad(X x, X sig) {
    return sig * madd<Fused>(x, 1.0f - sig, X{} + 1.0f);
}

// The causal depthwise convolution before the scan and its SiLU (primacy_mamba.compiled_conv, and compiled_fma's with
// Fused arithmetic): from x (B, T, E) with row t of batch element i at x + i xb + t xr (in_proj's output, viewed), taps
// w (K, E) and bias (E,),
//
//     pre_t = Σ_j w_j ⊙ x_{t-(K-1)+j} + bias  (x_{t<0} = 0: those taps are left out),   out_t = silu(pre_t),
//
// the taps summed in order j = 0, ..., K - 1, then the bias. Each position's row is taken in blocks of channels, 8
// floats at a time (as the mixer's rows; compiled_fma: 16) and the rest one by one, every tap of a block in registers.
template <bool Fused, typename X, typename R>
PRIMACY_INLINE X pre_at(int64_t t, int64_t K, const R* x, int64_t xr, const R* w, int64_t E, const R* bias) {
    const int64_t j0 = K - 1 - t > 0 ? K - 1 - t : 0;
    X pre = load<X>(x + (t - (K - 1) + j0) * xr) * load<X>(w + j0 * E);
    for (int64_t j = j0 + 1; j < K; ++j)
        pre = madd<Fused>(load<X>(x + (t - (K - 1) + j) * xr), load<X>(w + j * E), pre);
    return pre + load<X>(bias);
}
template <bool Fused, typename X, typename R>
PRIMACY_INLINE void conv_forward_at(int64_t T, int64_t E, int64_t K, const R* x, int64_t xr, const R* w,
                                    const R* bias, R* out) {
    for (int64_t t = 0; t < T; ++t) {
        const X pre = pre_at<Fused, X>(t, K, x, xr, w, E, bias);
        store(out + t * E, pre * sigmoid_of<Fused>(pre));
    }
}
// The first channel a row takes one by one: float ones past the last multiple of the block's width, double ones all.
template <typename X, typename R>
PRIMACY_INLINE int64_t past_blocks(int64_t E) {
    constexpr int64_t lanes = sizeof(X) / sizeof(R);
    return sizeof(R) == sizeof(float) ? E - E % lanes : 0;
}
template <bool Fused, typename X, typename R>
PRIMACY_INLINE void conv_forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                 int64_t xb, int64_t xr, const R* w, const R* bias, R* out) {
    const int64_t rest = past_blocks<X, R>(E);
    constexpr int64_t lanes = sizeof(X) / sizeof(R);
    for (int64_t i = first; i < last; ++i) {
        for (int64_t e = 0; e < rest; e += lanes)
            conv_forward_at<Fused, X>(T, E, K, x + i * xb + e, xr, w + e, bias + e, out + i * T * E + e);
        for (int64_t e = rest; e < E; ++e)
            conv_forward_at<Fused, R>(T, E, K, x + i * xb + e, xr, w + e, bias + e, out + i * T * E + e);
    }
}

// One block of channels of conv_forward's gradients: ∂L/∂pre_t = ∂L/∂out_t silu'(pre_t) (torch's silu backward) of
// every t into gpre (T rows of E), added to the element's ∂L/∂bias and, times x, to its ∂L/∂w_j; then gx_t =
// Σ_j w_j ⊙ ∂L/∂pre_{t+(K-1)-j} over the j with t + (K-1) - j < T, in order j = K - 1, ..., 0, into row t of gx
// (gxr apart).
template <bool Fused, typename X, typename R>
PRIMACY_INLINE void conv_backward_at(int64_t T, int64_t E, int64_t K, const R* x, int64_t xr, const R* w,
                                     const R* bias, const R* gout, R* gx, int64_t gxr, R* gw, R* gbias, R* gpre) {
    X gb = load<X>(gbias);
    for (int64_t t = 0; t < T; ++t) {
        const X pre = pre_at<Fused, X>(t, K, x, xr, w, E, bias);
        const X gp = load<X>(gout + t * E) * silu_grad<Fused>(pre, sigmoid_of<Fused>(pre));
        store(gpre + t * E, gp);
        gb += gp;
        for (int64_t j = K - 1 - t > 0 ? K - 1 - t : 0; j < K; ++j)
            store(gw + j * E, madd<Fused>(gp, load<X>(x + (t - (K - 1) + j) * xr), load<X>(gw + j * E)));
    }
    store(gbias, gb);
    for (int64_t t = 0; t < T; ++t) {
        const int64_t j0 = t + K - 1 - (T - 1) > 0 ? t + K - 1 - (T - 1) : 0;  // the first j with a later pre
        X g = load<X>(gpre + t * E) * load<X>(w + (K - 1) * E);
        for (int64_t j = K - 2; j >= j0; --j) g = madd<Fused>(load<X>(gpre + (t + K - 1 - j) * E), load<X>(w + j * E), g);
        store(gx + t * gxr, g);
    }
}

// conv_forward's gradients for [first, last): gx (row t of element i at gx + i gxb + t gxr), and per batch element
// the partial sums of ∂L/∂w (B, K, E) and ∂L/∂bias (B, E), summed by the caller in batch order. Scratch: ∂L/∂pre_t
// of every t (T E).
template <bool Fused, typename X, typename R>
PRIMACY_INLINE void conv_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                  int64_t xb, int64_t xr, const R* w, const R* bias, const R* gout, R* gx,
                                  int64_t gxb, int64_t gxr, R* gw_parts, R* gbias_parts, R* gpre) {
    const int64_t rest = past_blocks<X, R>(E);
    constexpr int64_t lanes = sizeof(X) / sizeof(R);
    for (int64_t i = first; i < last; ++i) {
        const R* xi = x + i * xb;
        R* gwi = gw_parts + i * K * E;
        R* gbi = gbias_parts + i * E;
        std::memset(gwi, 0, sizeof(R) * K * E);
        std::memset(gbi, 0, sizeof(R) * E);
        const R* go = gout + i * T * E;
        R* gxi = gx + i * gxb;
        for (int64_t e = 0; e < rest; e += lanes)
            conv_backward_at<Fused, X>(T, E, K, xi + e, xr, w + e, bias + e, go + e, gxi + e, gxr, gwi + e, gbi + e,
                                       gpre + e);
        for (int64_t e = rest; e < E; ++e)
            conv_backward_at<Fused, R>(T, E, K, xi + e, xr, w + e, bias + e, go + e, gxi + e, gxr, gwi + e, gbi + e,
                                       gpre + e);
    }
}

// scan='compiled_fma' (primacy_mamba.compiled_fma): the mixer between the convolution and the gate, as
// mixer_forward/mixer_backward, with Δ's low-rank projection folded in and every multiply-add fused. Per batch
// element i and position t, from u (B, T, E), the row xdbl_t = (δ_t (R), B_t (N), C_t (N)) of x_proj's output
// (B, T, R + 2N), dt_proj's weight given transposed wt (R, E), bias and d (E,), A given transposed at (N, E), and z (row
// t of element i at z + i zb + t zr: in_proj's other half, viewed):
//
//     Δ_t = softplus(Σ_r δ_t[r] wt_r + bias),  h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,
//     out_t = (h_t C_t + D ⊙ u_t) ⊙ silu(z_t).
//
// Channels are taken in blocks of 16 floats (F16; float64 one by one) with the rest one by one, each block's rows in
// registers over the N state indices; the state is kept (N, E). Sums over channels (∂L/∂B_t, ∂L/∂C_t, ∂L/∂δ_t) gather
// a block's lanes in per-lane partial sums, in channel order, which are then added in a fixed tree, the rest's own
// partial sum last: the same bits whatever the vector width the CPU runs.

template <typename R>
struct Block {
    typedef F16 type;
};
template <>
struct Block<double> {
    typedef double type;
};
template <typename X, typename R>
constexpr int64_t lanes_of() {
    return sizeof(X) / sizeof(R);
}

// softplus(x) (torch's threshold: x above 20) and its derivative from one exp: with w = e^-|x|, log(1 + e^x) =
// max(x, 0) + log(1 + w) and σ(x) = (x > 0 ? 1 : w) / (1 + w). float64: the C library's, as softplus/softplus_grad.
template <typename X>
PRIMACY_INLINE X log1p_fused(X w) {  // log1p_unit's series, fused
    const X zero{};
    const X s = w / (2.0f + w), s2 = s * s;
    X p = zero + 1.0f / 13;
    p = fused(p, s2, zero + 1.0f / 11);
    p = fused(p, s2, zero + 1.0f / 9);
    p = fused(p, s2, zero + 1.0f / 7);
    p = fused(p, s2, zero + 1.0f / 5);
    p = fused(p, s2, zero + 1.0f / 3);
    p = fused(p, s2, zero + 1.0f);
    return 2.0f * s * p;
}
template <typename X>
PRIMACY_INLINE void softplus_fused(X x, X& value, X& grad) {
    if constexpr (std::is_same_v<X, double>) {
        value = softplus(x);
        grad = softplus_grad(x);
    } else {
        const X zero{};
        const X w = exp_fused(x < zero ? x : -x);
        const auto above = x > zero + 20.0f;
        value = above ? x : (x > zero ? x : zero) + log1p_fused(w);
        grad = above ? zero + 1.0f : (x > zero ? zero + 1.0f : w) / (1.0f + w);
    }
}

// Σ of a block's lanes in a fixed tree (halves added pairwise), then the rest's partial sum.
template <typename R>
PRIMACY_INLINE R lanes_sum(const R* partial, int64_t lanes, R rest) {
    R v[16];
    for (int64_t k = 0; k < lanes; ++k) v[k] = partial[k];
    for (int64_t half = lanes / 2; half >= 1; half /= 2)
        for (int64_t k = 0; k < half; ++k) v[k] = v[k] + v[k + half];
    return v[0] + rest;
}

// Δ of a block of channels: Σ_r δ[r] wt_r + bias, the products fused in order r = 0, ..., R - 1.
template <typename X, typename R>
PRIMACY_INLINE X step_input(int64_t Rk, int64_t E, const R* dtl, const R* wt, const R* bias) {
    X x = load<X>(wt) * splat<X>(dtl[0]);
    for (int64_t r = 1; r < Rk; ++r) x = fused(load<X>(wt + r * E), splat<X>(dtl[r]), x);
    return x + load<X>(bias);
}

// One position's block of channels, forward: Δ, the N states (h (N, E) at the block, updated in place), the gate.
template <typename X, typename R>
PRIMACY_INLINE void fma_forward_block(int64_t E, int64_t N, int64_t Rk, const R* dtl, const R* bt, const R* ct,
                                      const R* wt, const R* bias, const R* at, const R* d, const R* ut, const R* zt,
                                      R* h, R* sums, R* outt) {
    X step, step_grad;
    softplus_fused(step_input<X>(Rk, E, dtl, wt, bias), step, step_grad);
    store(sums, load<X>(sums) + step);
    const X u = load<X>(ut);
    const X injected = step * u;
    X y = load<X>(d) * u;
    for (int64_t n = 0; n < N; ++n) {
        const X decay = exp_fused(step * load<X>(at + n * E));
        const X state = fused(decay, load<X>(h + n * E), injected * splat<X>(bt[n]));
        store(h + n * E, state);
        y = fused(state, splat<X>(ct[n]), y);
    }
    const X z = load<X>(zt);
    store(outt, y * (z * sigmoid_of<true>(z)));
}

// The backward's first pass at one position's block: as fma_forward_block, keeping Δ, softplus's derivative, ∂L/∂y
// (before the gate) and every h_t (not exp(Δ_t A): the walk back computes it again from the kept Δ, the same bits, in
// the time it took to stream T (N, E) decays back through memory); adds ∂L/∂y h_t to the partial sums of ∂L/∂C_t
// (gc, N of the block's lanes) and writes ∂L/∂z_t.
template <typename X, typename R>
PRIMACY_INLINE void fma_keep_block(int64_t E, int64_t N, int64_t Rk, const R* dtl, const R* bt, const R* ct,
                                   const R* wt, const R* bias, const R* at, const R* d, const R* ut, const R* zt,
                                   const R* got, const R* __restrict__ before, R* __restrict__ now,
                                   R* __restrict__ steps, R* __restrict__ step_grads,
                                   R* __restrict__ gys, R* __restrict__ gzt, R* __restrict__ gc) {
    constexpr int64_t lanes = lanes_of<X, R>();
    X step, step_grad;
    softplus_fused(step_input<X>(Rk, E, dtl, wt, bias), step, step_grad);
    store(steps, step);
    store(step_grads, step_grad);
    const X u = load<X>(ut);
    const X injected = step * u;
    const X z = load<X>(zt), go = load<X>(got);
    const X sig = sigmoid_of<true>(z);
    const X gy = go * (z * sig);
    store(gys, gy);
    X y = load<X>(d) * u;
    for (int64_t n = 0; n < N; ++n) {
        const X decay = exp_fused(step * load<X>(at + n * E));
        const X state = fused(decay, load<X>(before + n * E), injected * splat<X>(bt[n]));
        store(now + n * E, state);
        y = fused(state, splat<X>(ct[n]), y);
        store(gc + n * lanes, fused(gy, state, load<X>(gc + n * lanes)));
    }
    store(gzt, go * y * silu_grad<true>(z, sig));
}

// The backward's walk back at one position's block: exp(Δ A_n) again (as the first pass), G = ∂L/∂y C_n + carry,
// ∂L/∂(Δ A_n) = G h_{t-1} exp(Δ A_n); adds to the element's ∂L/∂A (ga), sets carry for t - 1, adds G Δ u to the
// partial sums of ∂L/∂B_t (gb), then writes ∂L/∂u_t, adds to ∂L/∂bias, ∂L/∂D, ∂L/∂wt (gw, R rows of E) and the
// partial sums of ∂L/∂δ_t (gdl, R of the block's lanes).
template <typename X, typename R>
PRIMACY_INLINE void fma_back_block(int64_t E, int64_t N, int64_t Rk, const R* dtl, const R* bt, const R* ct,
                                   const R* wt, const R* at, const R* d, const R* ut, const R* st, const R* sg,
                                   const R* gyt, const R* __restrict__ before, R* __restrict__ carry,
                                   R* __restrict__ ga, R* __restrict__ gb, R* __restrict__ gdl,
                                   R* __restrict__ gut, R* __restrict__ gbias, R* __restrict__ gd,
                                   R* __restrict__ gw) {
    constexpr int64_t lanes = lanes_of<X, R>();
    const X step = load<X>(st), gy = load<X>(gyt), u = load<X>(ut);
    const X injected = step * u;
    X log_sum{}, inject_sum{};
    for (int64_t n = 0; n < N; ++n) {
        const int64_t at_n = n * E;
        const X a_n = load<X>(at + at_n);
        const X decay = exp_fused(step * a_n);
        const X g = fused(gy, splat<X>(ct[n]), load<X>(carry + at_n));
        const X through_decay = g * load<X>(before + at_n) * decay;
        store(ga + at_n, fused(through_decay, step, load<X>(ga + at_n)));
        log_sum = fused(through_decay, a_n, log_sum);
        inject_sum = fused(g, splat<X>(bt[n]), inject_sum);
        store(carry + at_n, decay * g);
        store(gb + n * lanes, fused(g, injected, load<X>(gb + n * lanes)));
    }
    store(gut, fused(inject_sum, step, gy * load<X>(d)));
    const X gx = fused(inject_sum, u, log_sum) * load<X>(sg);  // ∂L/∂(Σ_r δ[r] wt_r + bias)
    store(gbias, load<X>(gbias) + gx);
    store(gd, fused(gy, u, load<X>(gd)));
    for (int64_t r = 0; r < Rk; ++r) {
        store(gw + r * E, fused(gx, splat<X>(dtl[r]), load<X>(gw + r * E)));
        store(gdl + r * lanes, fused(gx, load<X>(wt + r * E), load<X>(gdl + r * lanes)));
    }
}

// fma_forward: out (B, T, E) and dt_sums (B, E), each batch element's Σ_t Δ_t. Scratch: h (N E).
template <typename R>
void fma_forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, int64_t Rk, const R* u, const R* xdbl,
                 const R* wt, const R* bias, const R* at, const R* d, const R* z, int64_t zb, int64_t zr, R* out,
                 R* dt_sums, R* h) {
    typedef typename Block<R>::type X;
    constexpr int64_t lanes = lanes_of<X, R>();
    const int64_t whole = E - E % lanes, C = Rk + 2 * N;
    for (int64_t i = first; i < last; ++i) {
        R* sums = dt_sums + i * E;
        std::memset(h, 0, sizeof(R) * N * E);  // h_{-1}
        std::memset(sums, 0, sizeof(R) * E);
        for (int64_t t = 0; t < T; ++t) {
            const R* row = xdbl + (i * T + t) * C;
            const R *ut = u + (i * T + t) * E, *zt = z + i * zb + t * zr;
            R* outt = out + (i * T + t) * E;
            for (int64_t e = 0; e < whole; e += lanes)
                fma_forward_block<X>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, bias + e, at + e, d + e, ut + e,
                                     zt + e, h + e, sums + e, outt + e);
            for (int64_t e = whole; e < E; ++e)
                fma_forward_block<R>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, bias + e, at + e, d + e, ut + e,
                                     zt + e, h + e, sums + e, outt + e);
        }
    }
}

// fma_forward's gradients for [first, last): gu (B, T, E), gxdbl (B, T, R + 2N: ∂L/∂δ_t, ∂L/∂B_t, ∂L/∂C_t), gz (row t
// of element i at gz + i gzb + t gzr), and per batch element the partial sums of ∂L/∂A (transposed, (B, N, E)),
// ∂L/∂bias, ∂L/∂D ((B, E) each) and ∂L/∂wt ((B, R, E)), summed by the caller in batch order. A first pass over time
// computes one element's Δ_t and h_t as fma_forward does and keeps them, with ∂L/∂C_t and ∂L/∂z_t; the second walks
// back, computing exp(Δ_t A) again. (Taking time in cache-sized chunks, from checkpoints the forward keeps, was no
// faster, alone or in a training step, at T 64 and 256; keeping every exp(Δ_t A) from the first pass, as primacy-mamba
// 0.5 did, gives the same bits at the same speed, within ±3 % in the backward alone and in a training step at T 64
// and 256, with T N E more scratch.) Scratch ((T + 2) N E + 3 T E + (N + R) 17): every
// h_t ((T + 1) N E), the carry (N E), every Δ_t, softplus' and ∂L/∂y_t (T E each), and the partial sums over channels
// (N + R sums, 16 lanes and the rest).
template <typename R>
void fma_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, int64_t Rk, const R* u,
                  const R* xdbl, const R* wt, const R* bias, const R* at, const R* d, const R* z, int64_t zb,
                  int64_t zr, const R* gout, R* gu, R* gxdbl, R* gz, int64_t gzb, int64_t gzr, R* ga_parts,
                  R* gbias_parts, R* gd_parts, R* gw_parts, R* scratch) {
    typedef typename Block<R>::type X;
    constexpr int64_t lanes = lanes_of<X, R>();
    const int64_t whole = E - E % lanes, C = Rk + 2 * N;
    R* states = scratch;  // h_{-1} = 0, h_0, ..., h_{T-1}, (N, E) each
    R* carry = states + (T + 1) * N * E;
    R* steps = carry + N * E;
    R* step_grads = steps + T * E;
    R* gys = step_grads + T * E;
    R* partial = gys + T * E;  // (N + R) sums: lanes partial sums of the blocks, then one of the rest
    R* rest = partial + (N + Rk) * 16;
    for (int64_t i = first; i < last; ++i) {
        const R* ui = u + i * T * E;
        std::memset(states, 0, sizeof(R) * N * E);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {
            const R* row = xdbl + (i * T + t) * C;
            const R *ut = ui + t * E, *zt = z + i * zb + t * zr, *got = gout + (i * T + t) * E;
            R *before = states + t * N * E, *now = before + N * E;
            R *st = steps + t * E, *sg = step_grads + t * E, *gy = gys + t * E, *gzt = gz + i * gzb + t * gzr;
            std::memset(partial, 0, sizeof(R) * (N + Rk) * 17);
            for (int64_t e = 0; e < whole; e += lanes)
                fma_keep_block<X>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, bias + e, at + e, d + e, ut + e,
                                  zt + e, got + e, before + e, now + e, st + e, sg + e, gy + e, gzt + e, partial);
            for (int64_t e = whole; e < E; ++e)
                fma_keep_block<R>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, bias + e, at + e, d + e, ut + e,
                                  zt + e, got + e, before + e, now + e, st + e, sg + e, gy + e, gzt + e, rest);
            R* gct = gxdbl + (i * T + t) * C + Rk + N;
            for (int64_t n = 0; n < N; ++n) gct[n] = lanes_sum(partial + n * lanes, lanes, rest[n]);
        }
        R* ga = ga_parts + i * N * E;
        R *gbias = gbias_parts + i * E, *gd = gd_parts + i * E, *gw = gw_parts + i * Rk * E;
        std::memset(carry, 0, sizeof(R) * N * E);
        std::memset(ga, 0, sizeof(R) * N * E);
        std::memset(gbias, 0, sizeof(R) * E);
        std::memset(gd, 0, sizeof(R) * E);
        std::memset(gw, 0, sizeof(R) * Rk * E);
        for (int64_t t = T - 1; t >= 0; --t) {
            const R* row = xdbl + (i * T + t) * C;
            const R *ut = ui + t * E, *st = steps + t * E, *sg = step_grads + t * E, *gy = gys + t * E;
            const R* before = states + t * N * E;
            R* gut = gu + (i * T + t) * E;
            std::memset(partial, 0, sizeof(R) * (N + Rk) * 17);
            for (int64_t e = 0; e < whole; e += lanes)
                fma_back_block<X>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, at + e, d + e, ut + e, st + e,
                                  sg + e, gy + e, before + e, carry + e, ga + e, partial,
                                  partial + N * lanes, gut + e, gbias + e, gd + e, gw + e);
            for (int64_t e = whole; e < E; ++e)
                fma_back_block<R>(E, N, Rk, row, row + Rk, row + Rk + N, wt + e, at + e, d + e, ut + e, st + e,
                                  sg + e, gy + e, before + e, carry + e, ga + e, rest, rest + N, gut + e,
                                  gbias + e, gd + e, gw + e);
            R* grow = gxdbl + (i * T + t) * C;
            for (int64_t n = 0; n < N; ++n) grow[Rk + n] = lanes_sum(partial + n * lanes, lanes, rest[n]);
            for (int64_t r = 0; r < Rk; ++r) grow[r] = lanes_sum(partial + (N + r) * lanes, lanes, rest[N + r]);
        }
    }
}

// compiled_fma's RMSNorm (mambapy's: y = x / sqrt(mean(x²) + eps) ⊙ w) over rows of D values, and its gradients. The
// row's Σ x² is taken as the sums over channels above (blocks of 16 lanes, the rest, then a fixed tree); rs (rows,)
// keeps each row's 1 / sqrt(mean + eps) for the backward.
template <typename R>
PRIMACY_INLINE R inverse_rms(int64_t D, const R* x, R eps, R* partial) {
    typedef typename Block<R>::type X;
    constexpr int64_t lanes = lanes_of<X, R>();
    const int64_t whole = D - D % lanes;
    X acc{};
    for (int64_t e = 0; e < whole; e += lanes) acc = fused(load<X>(x + e), load<X>(x + e), acc);
    R rest{};
    for (int64_t e = whole; e < D; ++e) rest = fused(x[e], x[e], rest);
    store(partial, acc);
    return R(1) / std::sqrt(lanes_sum(partial, lanes, rest) / R(D) + eps);
}
template <typename R>
void rms_forward(int64_t first, int64_t last, int64_t D, const R* x, const R* w, R eps, R* y, R* rs) {
    typedef typename Block<R>::type X;
    constexpr int64_t lanes = lanes_of<X, R>();
    const int64_t whole = D - D % lanes;
    R partial[16];
    for (int64_t row = first; row < last; ++row) {
        const R* xr = x + row * D;
        R* yr = y + row * D;
        const R r = inverse_rms(D, xr, eps, partial);
        rs[row] = r;
        for (int64_t e = 0; e < whole; e += lanes) store(yr + e, load<X>(xr + e) * splat<X>(r) * load<X>(w + e));
        for (int64_t e = whole; e < D; ++e) yr[e] = xr[e] * r * w[e];
    }
}
// Rows [first, last) of elements of T rows each: gx = r (gy ⊙ w) - x r³ Σ(gy ⊙ w ⊙ x) / D, and each element's partial
// sum of ∂L/∂w = Σ_rows gy ⊙ x r into gw_parts (one row of D per element), summed by the caller in element order.
template <typename R>
void rms_backward(int64_t first, int64_t last, int64_t T, int64_t D, const R* x, const R* w, const R* rs,
                  const R* gy, R* gx, R* gw_parts) {
    typedef typename Block<R>::type X;
    constexpr int64_t lanes = lanes_of<X, R>();
    const int64_t whole = D - D % lanes;
    R partial[16];
    for (int64_t i = first; i < last; ++i) {
        R* gw = gw_parts + i * D;
        std::memset(gw, 0, sizeof(R) * D);
        for (int64_t row = i * T; row < (i + 1) * T; ++row) {
            const R *xr = x + row * D, *gr = gy + row * D;
            R* gxr = gx + row * D;
            const R r = rs[row];
            X acc{};
            for (int64_t e = 0; e < whole; e += lanes)
                acc = fused(load<X>(gr + e) * load<X>(w + e), load<X>(xr + e), acc);
            R rest{};
            for (int64_t e = whole; e < D; ++e) rest = fused(gr[e] * w[e], xr[e], rest);
            store(partial, acc);
            const R k = r * r * r * lanes_sum(partial, lanes, rest) / R(D);
            for (int64_t e = 0; e < whole; e += lanes) {
                const X g = load<X>(gr + e), v = load<X>(xr + e);
                store(gxr + e, fused(g * load<X>(w + e), splat<X>(r), -(v * splat<X>(k))));
                store(gw + e, fused(g, v * splat<X>(r), load<X>(gw + e)));
            }
            for (int64_t e = whole; e < D; ++e) {
                gxr[e] = fused(gr[e] * w[e], r, -(xr[e] * k));
                gw[e] = fused(gr[e], xr[e] * r, gw[e]);
            }
        }
    }
}

// compiled_fma's convolution: Fused arithmetic, blocks of 16 floats (float64 one channel at a time)
template <typename R>
void conv_forward_fused(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                       int64_t xb, int64_t xr, const R* w, const R* bias, R* out) {
    conv_forward<true, typename Block<R>::type>(first, last, T, E, K, x, xb, xr, w, bias, out);
}
template <typename R>
void conv_backward_fused(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                        int64_t xb, int64_t xr, const R* w, const R* bias, const R* gout, R* gx,
                                        int64_t gxb, int64_t gxr, R* gw_parts, R* gbias_parts, R* gpre) {
    conv_backward<true, typename Block<R>::type>(first, last, T, E, K, x, xb, xr, w, bias, gout, gx, gxb, gxr,
                                                 gw_parts, gbias_parts, gpre);
}

}  // namespace PRIMACY_FMA_PASS
}  // namespace
#endif  // PRIMACY_FMA_PASS
