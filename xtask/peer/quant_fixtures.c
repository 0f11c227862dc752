// `cargo xtask peer quant-fixtures`: the bytes weft-quant's pinned tests
// compare against, computed by ggml itself (the peer's libggml-base, whose
// ggml-quants.c is built for baseline x86-64: no FMA, so no contraction).
//
// For each block type this writes two dequantisation records:
//   - blocks ggml's own quantiser made from fixed rows (`ggml_quantize_chunk`,
//     no importance matrix: what `llama-quantize` does without one), and
//   - blocks of random bytes: every scale bit pattern is fair game (NaN, Inf,
//     subnormal halves), so the records pin ggml's arithmetic, not just its
//     happy path;
// each followed by ggml's `to_float` of those bytes. Then one quantisation
// record: the rows through `quantize_row_q8_K_ref` (activations for the
// K-quant dot products).
//
// File layout (little-endian): "WEFTQFX1", u32 record count, then records
//   u8 kind (0 dequantise: bytes then f32s; 1 quantise: f32s then bytes),
//   u8 name length, name (ggml's type name), u32 elements, u32 bytes, data.

#include "ggml.h"
#include "ggml-quants.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define ROWS 2
#define ROW_LEN 1024

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t next_u64(void) {
    // xorshift64*: fixed seed, so the file is the same on every run.
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static float uniform(void) {  // [-1, 1)
    return (float)((double)(next_u64() >> 11) / 4503599627370496.0 - 1.0);
}

static float gaussish(void) {  // sum of four uniforms: bell-shaped, bounded
    return (uniform() + uniform() + uniform() + uniform()) * 0.5f;
}

// Rows that exercise the quantisers: weight-like values, outliers, a zero
// super-block, a constant one, values too small for a binary16 scale,
// large ones, and blocks whose magnitude steps by powers of two.
static void fill_rows(float *x) {
    float *r0 = x, *r1 = x + ROW_LEN;
    for (int i = 0; i < ROW_LEN; i++) {
        r0[i] = 0.02f * gaussish();
        if (i % 37 == 5) r0[i] *= 50.0f;
    }
    for (int i = 0; i < 256; i++) r1[i] = 0.0f;
    for (int i = 256; i < 320; i++) r1[i] = 0.375f;
    for (int i = 320; i < 384; i++) r1[i] = 1e-30f * uniform();
    for (int i = 384; i < 512; i++) r1[i] = 3000.0f * uniform();
    for (int i = 512; i < ROW_LEN; i++) r1[i] = ldexpf(uniform(), (i / 32) % 24 - 16);
}

// Where a block keeps its binary16 super-scale and minimum (-1: none);
// the random records plant special values there (see `plant`).
static void scale_fields(enum ggml_type type, int *d, int *m) {
    *m = -1;
    switch (type) {
    case GGML_TYPE_Q4_0: *d = offsetof(block_q4_0, d); break;
    case GGML_TYPE_Q4_1: *d = offsetof(block_q4_1, d); *m = offsetof(block_q4_1, m); break;
    case GGML_TYPE_Q5_0: *d = offsetof(block_q5_0, d); break;
    case GGML_TYPE_Q5_1: *d = offsetof(block_q5_1, d); *m = offsetof(block_q5_1, m); break;
    case GGML_TYPE_Q8_0: *d = offsetof(block_q8_0, d); break;
    case GGML_TYPE_Q2_K: *d = offsetof(block_q2_K, d); *m = offsetof(block_q2_K, dmin); break;
    case GGML_TYPE_Q3_K: *d = offsetof(block_q3_K, d); break;
    case GGML_TYPE_Q4_K: *d = offsetof(block_q4_K, d); *m = offsetof(block_q4_K, dmin); break;
    case GGML_TYPE_Q5_K: *d = offsetof(block_q5_K, d); *m = offsetof(block_q5_K, dmin); break;
    case GGML_TYPE_Q6_K: *d = offsetof(block_q6_K, d); break;
    default: *d = 0; break; /* F16, BF16: the element itself */
    }
}

// Random bytes hit a binary16 infinity once in 2048 draws; plant the
// special scales in the first blocks so every record meets them: +inf,
// -inf, a quiet and a signalling NaN, the smallest subnormal, the largest
// finite, -0. (For BF16 the same 16 bits mean other specials: that is fine.)
static void plant(enum ggml_type type, uint8_t *r, size_t n_blocks) {
    static const uint16_t specials[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x7bff, 0x8000};
    const size_t n = sizeof specials / sizeof specials[0];
    int d, m;
    scale_fields(type, &d, &m);
    size_t block_bytes = ggml_type_size(type);
    for (size_t b = 0; b < n && b < n_blocks; b++) {
        memcpy(r + b * block_bytes + d, &specials[b], 2);
        if (m >= 0) memcpy(r + b * block_bytes + m, &specials[n - 1 - b], 2);
    }
}

static FILE *out;
static uint32_t records;

static void put(const void *p, size_t n) {
    if (fwrite(p, 1, n, out) != n) { perror("write"); exit(1); }
}

static void header(uint8_t kind, const char *name, uint32_t elements, uint32_t bytes) {
    uint8_t len = (uint8_t)strlen(name);
    put(&kind, 1); put(&len, 1); put(name, len);
    put(&elements, 4); put(&bytes, 4);
    records++;
}

static void dequant_record(enum ggml_type type, const uint8_t *bytes, int64_t elements) {
    const struct ggml_type_traits *t = ggml_get_type_traits(type);
    size_t n_bytes = ggml_row_size(type, elements);
    float *y = malloc(sizeof(float) * (size_t)elements);
    t->to_float(bytes, y, elements);
    header(0, t->type_name, (uint32_t)elements, (uint32_t)n_bytes);
    put(bytes, n_bytes);
    put(y, sizeof(float) * (size_t)elements);
    free(y);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s OUT\n", argv[0]); return 2; }
    out = fopen(argv[1], "wb");
    if (!out) { perror(argv[1]); return 1; }
    put("WEFTQFX1", 8);
    uint32_t placeholder = 0;
    put(&placeholder, 4);

    static float rows[ROWS * ROW_LEN];
    fill_rows(rows);

    const enum ggml_type types[] = {
        GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,
        GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum ggml_type type = types[k];
        size_t row_bytes = ggml_row_size(type, ROW_LEN);
        uint8_t *q = malloc(row_bytes * ROWS);
        ggml_quantize_chunk(type, rows, q, 0, ROWS, ROW_LEN, NULL);
        dequant_record(type, q, (int64_t)ROWS * ROW_LEN);
        free(q);

        // Random bytes: 12 super-blocks or 64 small blocks (1024 plain
        // elements), enough that every field sees odd patterns.
        int64_t block = ggml_blck_size(type);
        int64_t elements = block == 256 ? 12 * 256 : block == 32 ? 64 * 32 : 1024;
        size_t n_bytes = ggml_row_size(type, elements);
        uint8_t *r = malloc(n_bytes);
        for (size_t i = 0; i < n_bytes; i++) r[i] = (uint8_t)(next_u64() >> 56);
        plant(type, r, (size_t)(elements / block));
        dequant_record(type, r, elements);
        free(r);
    }

    // Q8_K: ggml's activation quantiser for the K-quant dot products.
    {
        size_t n_bytes = (size_t)ROWS * ROW_LEN / 256 * sizeof(block_q8_K);
        // calloc: ggml leaves an all-zero super-block's bsums unwritten;
        // zero is what they sum to, and what Weft writes.
        block_q8_K *y = calloc(1, n_bytes);
        quantize_row_q8_K_ref(rows, y, (int64_t)ROWS * ROW_LEN);
        header(1, "q8_K", ROWS * ROW_LEN, (uint32_t)n_bytes);
        put(rows, sizeof rows);
        put(y, n_bytes);
        free(y);
    }

    fseek(out, 8, SEEK_SET);
    put(&records, 4);
    if (fclose(out) != 0) { perror("close"); return 1; }
    fprintf(stderr, "%u records\n", records);
    return 0;
}
