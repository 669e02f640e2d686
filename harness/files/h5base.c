/* HDF5 set-up, errors and types shared by the run-file writer and reader.
 * See h5base.h. */
#include "h5base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "h5write.h"
#include "scrub.h"

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is int64_t in HDF5 1.10");

/* ------------------------------------------------------------------------ */
/* HDF5 set-up and errors                                                   */
/* ------------------------------------------------------------------------ */

static pthread_once_t fapl_once = PTHREAD_ONCE_INIT;
static hid_t shared_fapl = H5I_INVALID_HID;

static void make_fapl(void)
{
    /* No H5_term_library at exit (it must be said before the library's
     * first call, hence here, and fh_h5base_enter calls this first). A file whose
     * close failed part way (a full disk: EFBIG/ENOSPC while flushing)
     * stays in HDF5's ID table half torn down, and 1.10.8's termination
     * then dereferences NULL closing it again (H5F__close_cb): fattn
     * reported the failure cleanly and then died of SIGSEGV in exit().
     * Every file fattn opens is closed explicitly, so nothing is lost;
     * tests/test_reliability.py "disk full" is the regression test. */
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (p < 0)
        return;
    if (H5Pset_libver_bounds(p, H5F_LIBVER_V18, H5F_LIBVER_V110) < 0 ||
        /* Lock, but go on where the file system has no locks (NFS). */
        H5Pset_file_locking(p, 1, 1) < 0) {
        H5Pclose(p);
        return;
    }
    shared_fapl = p;
}

fattn_status fh_h5base_enter(hid_t *fapl)
{
    pthread_once(&fapl_once, make_fapl);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (shared_fapl < 0)
        return fattn_error(FATTN_E_INTERNAL, "HDF5: cannot create the file access property list");
    if (fapl)
        *fapl = shared_fapl;
    return FATTN_OK;
}

typedef struct stack_info {
    char api[96];
    char deep[512];
    unsigned frames;
} stack_info;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *ctx)
{
    stack_info *si = ctx;
    if (n == 0)
        snprintf(si->api, sizeof si->api, "%s", e->func_name ? e->func_name : "?");
    snprintf(si->deep, sizeof si->deep, "%s", e->desc ? e->desc : "?");
    si->frames = n + 1;
    return 0;
}

fattn_status fh_h5base_fail(fattn_status st, const char *fmt, ...)
{
    char ctx[8192]; /* two long paths and what was being done */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    stack_info si = {"", "", 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &si);
    H5Eclear2(H5E_DEFAULT);
    if (si.frames == 0)
        return fattn_error(st, "%s: HDF5 call failed", ctx);
    /* libhdf5's words: one line, no addresses (the context is fattn's own) */
    fh_scrub_text(si.api);
    fh_scrub_text(si.deep);
    return fattn_error(st, "%s: %s: %s", ctx, si.api, si.deep);
}

double fh_h5base_file_span(hid_t file)
{
    haddr_t eoa = 0;
    hsize_t size = 0;
    double span = -1;
    if (H5Fget_eoa(file, &eoa) >= 0 && eoa != HADDR_UNDEF)
        span = (double)eoa;
    else if (H5Fget_filesize(file, &size) >= 0)
        span = (double)size;
    H5Eclear2(H5E_DEFAULT);
    return span;
}

void fh_h5base_close(hid_t id)
{
    if (id < 0)
        return;
    H5E_BEGIN_TRY
    {
        switch (H5Iget_type(id)) {
        case H5I_DATATYPE: H5Tclose(id); break;
        case H5I_DATASPACE: H5Sclose(id); break;
        case H5I_GENPROP_LST: H5Pclose(id); break;
        case H5I_ATTR: H5Aclose(id); break;
        default: H5Oclose(id); break;
        }
    }
    H5E_END_TRY;
}

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

hid_t fh_h5base_vlen_string_type(H5T_cset_t cset)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return t;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, cset) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}
