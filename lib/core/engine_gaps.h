/* The engine dispatch's check of an engine's own gaps (not installed):
 * the support table's rows of status FATTN_E_UNSUPPORTED for the engine
 * (FATTN_SUPPORT_ENGINE_* bit) at its cuDNN version and its device's GPU
 * architecture (sm, 90 = sm_90), for a forward or a
 * backward call. fattn_engine_fwd / fattn_engine_bwd call them before the
 * engine runs; a test that drives an engine's parts directly calls them as
 * the dispatch would. */
#ifndef FATTN_CORE_ENGINE_GAPS_H
#define FATTN_CORE_ENGINE_GAPS_H

#include "fattn/engine.h"

fattn_status fattn__engine_gaps_fwd(const fattn_fwd_params *p, unsigned engine,
                                    long cudnn_version, int sm);
fattn_status fattn__engine_gaps_bwd(const fattn_bwd_params *p, unsigned engine,
                                    long cudnn_version, int sm);

#endif /* FATTN_CORE_ENGINE_GAPS_H */
