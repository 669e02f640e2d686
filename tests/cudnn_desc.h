/* The cuDNN engine's description of a call as the engine gets it: the
 * dispatch's geometry of the params (fattn__geom_init_fwd / _bwd), then
 * cg_*_desc_from_geom. For tests that describe calls without running them. */
#ifndef FATTN_TESTS_CUDNN_DESC_H
#define FATTN_TESTS_CUDNN_DESC_H

#include "core/geom.h"
#include "cudnn/graph.h"

static inline fattn_status tdesc_fwd(const fattn_fwd_params *p, cg_fwd_desc *d)
{
    fattn_geom g;
    fattn_status st = fattn__geom_init_fwd(&g, p, "forward");
    if (st != FATTN_OK)
        return st;
    st = fattn__cg_fwd_desc_from_geom(&g, p, d);
    fattn__geom_free(&g);
    return st;
}

static inline fattn_status tdesc_bwd(const fattn_bwd_params *p, cg_bwd_desc *d)
{
    fattn_geom g;
    fattn_status st = fattn__geom_init_bwd(&g, p, "backward");
    if (st != FATTN_OK)
        return st;
    st = fattn__cg_bwd_desc_from_geom(&g, p, d);
    fattn__geom_free(&g);
    return st;
}

#endif
