/* fattn/clock.h — the one monotonic clock fattn times itself with (engine
 * host time, plan builds, the harness's child watchdog). */
#ifndef FATTN_CLOCK_H
#define FATTN_CLOCK_H

#include "fattn/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on CLOCK_MONOTONIC: only differences mean anything. */
FATTN_API double fattn_now_s(void);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_CLOCK_H */
