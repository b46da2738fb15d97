/* dtype.h - element types of weights and tensors, and their conversions.
 *
 * Weights may be stored as F32, F16 or BF16 (what the safetensors file holds);
 * activations and accumulation are always F32. Conversions are exact for
 * F16/BF16 -> F32 (every half value is representable) and round to nearest
 * even for F32 -> F16/BF16. */
#ifndef BG_DTYPE_H
#define BG_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum dtype { DTYPE_F32, DTYPE_F16, DTYPE_BF16 };

static inline size_t dtype_size(enum dtype t) { return t == DTYPE_F32 ? 4 : 2; }

static inline const char *dtype_name(enum dtype t)
{
    return t == DTYPE_F32 ? "F32" : t == DTYPE_F16 ? "F16" : "BF16";
}

static inline float dtype_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)      /* NaN stays a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {                               /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);   /* inf, NaN */
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t dtype_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);     /* NaN */
    if (absu >= 0x477ff000u)                    /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) {                   /* below the smallest normal half */
        if (absu < 0x33000000u)
            return (uint16_t)sign;              /* rounds to zero */
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exp;             /* 14 + (113 - exp) */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t v = absu - ((127u - 15u) << 23);
    v += 0xfffu + ((v >> 13) & 1u);             /* round to nearest even */
    return (uint16_t)(sign | (v >> 13));
}

#endif
