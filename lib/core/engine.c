/* Engine dispatch: the one place front ends call into an engine. */
#include <stddef.h>

#include "fattn/engine.h"

fattn_status fattn_engine_fwd(fattn_engine *e, const fattn_fwd_params *p)
{
    if (!e || !e->ops || !p)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_fwd: NULL engine or params");
    return e->ops->fwd(e, p);
}

fattn_status fattn_engine_bwd(fattn_engine *e, const fattn_bwd_params *p)
{
    if (!e || !e->ops || !p)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_bwd: NULL engine or params");
    return e->ops->bwd(e, p);
}

const char *fattn_engine_name(const fattn_engine *e)
{
    return (e && e->ops) ? e->ops->name : "none";
}

void fattn_engine_free(fattn_engine *e)
{
    if (e && e->ops && e->ops->free)
        e->ops->free(e);
}
