/* fattn/rng.h — the random-number generator a front end draws rng_state from.
 *
 * TE's forward takes a torch.Generator (rng_gen; None = PyTorch's default CUDA
 * generator) and on every forward asks it for philox_cuda_state(16)
 * (transformer_engine/pytorch/csrc/extensions/attention.cpp:231-236): the
 * rng_state tensor becomes (seed, offset) and the generator's offset then
 * advances by 16 (the F16 backend's rng_elts_per_thread, which PyTorch rounds
 * up to a multiple of 4). This is only the state; each front end implements
 * the advance itself (they are independent witnesses). One generator per case
 * run, started at (spec.rng_seed, spec.rng_offset).
 */
#ifndef FATTN_RNG_H
#define FATTN_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fattn_rng_gen {
    uint64_t seed;
    uint64_t offset;
} fattn_rng_gen;

/* The per-forward offset increment of TE's F16 backend. */
#define FATTN_RNG_F16_INCREMENT 16u

#ifdef __cplusplus
}
#endif
#endif /* FATTN_RNG_H */
