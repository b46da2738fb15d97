/* sha256.h - SHA-256 (FIPS 180-4), for API keys: the configuration holds
 * only the digest of each key (`batchgate hash-key`), so a leaked config
 * file does not leak the keys. Streaming (init, update, final) and one-shot. */
#ifndef BG_SHA256_H
#define BG_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_BLOCK_LEN 64

struct sha256 {
    uint32_t h[8];
    uint64_t bytes;                   /* message length so far */
    uint8_t block[SHA256_BLOCK_LEN];  /* a partial block */
    size_t fill;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* The digest; s must be initialized again before reuse. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_DIGEST_LEN]);
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);

/* 64 lowercase hex digits and a NUL into hex. */
void sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char hex[2 * SHA256_DIGEST_LEN + 1]);

#endif
