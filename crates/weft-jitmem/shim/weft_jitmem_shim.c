/*
 * weft-jitmem's C shim: the few things Rust cannot say portably.
 *
 * - Linux/Android arm64: data-cache clean and instruction-cache invalidate
 *   to the point of unification over a freshly written code range, driven by
 *   the line sizes in CTR_EL0 (the same sequence as compiler-rt's
 *   __clear_cache). The caller then flips the range to read-execute.
 * - macOS arm64: copy into a MAP_JIT region with the thread's JIT write
 *   protection lifted for exactly the copy, then invalidate the icache, all
 *   inside ONE call so no Rust code ever runs while this thread can write
 *   to JIT memory.
 *
 * Only async-signal-safe work happens here (no locks, no allocation): the
 * probe calls these functions in a forked child.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__aarch64__)

uint64_t weft_jitmem_ctr_el0(void) {
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    return ctr;
}

#if defined(__APPLE__)
#include <libkern/OSCacheControl.h>
#include <pthread.h>

int weft_jitmem_macos_write(void *dst, const void *src, size_t len, size_t map_len) {
    pthread_jit_write_protect_np(0);
    memcpy(dst, src, len);
    /* The tail stays zero: 0x00000000 is UDF #0, so running off the end traps. */
    memset((char *)dst + len, 0, map_len - len);
    pthread_jit_write_protect_np(1);
    sys_icache_invalidate(dst, map_len);
    return 0;
}

#else /* Linux, Android */

void weft_jitmem_sync_icache(void *start, size_t len) {
    uintptr_t begin = (uintptr_t)start;
    uintptr_t end = begin + len;
    uint64_t ctr = weft_jitmem_ctr_el0();

    /* CTR_EL0.IDC (bit 28): no dcache clean needed for I/D coherence. */
    if (((ctr >> 28) & 1) == 0) {
        uintptr_t line = (uintptr_t)4 << ((ctr >> 16) & 15); /* DminLine */
        for (uintptr_t a = begin & ~(line - 1); a < end; a += line)
            __asm__ volatile("dc cvau, %0" ::"r"(a) : "memory");
    }
    __asm__ volatile("dsb ish" ::: "memory");

    /* CTR_EL0.DIC (bit 29): no icache invalidation needed. */
    if (((ctr >> 29) & 1) == 0) {
        uintptr_t line = (uintptr_t)4 << (ctr & 15); /* IminLine */
        for (uintptr_t a = begin & ~(line - 1); a < end; a += line)
            __asm__ volatile("ic ivau, %0" ::"r"(a) : "memory");
        __asm__ volatile("dsb ish" ::: "memory");
    }
    __asm__ volatile("isb" ::: "memory");
}

#endif
#endif /* __aarch64__ */
